package replication_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/replication"
)

// TestSlotsAndGapsOnRealPostgres reads slots as pg_replication_slots shows
// them (LSNs scanned straight into pglogrepl.LSN, NULLs included) and checks
// that each way the library notices a gap wraps ErrGap.
func TestSlotsAndGapsOnRealPostgres(t *testing.T) {
	cluster := relaytest.PrivateCluster(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	regular, repl, err := replication.ParseConnString(cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, regular)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	table := contract.Table{Schema: "public", Name: "outbox_events"}
	exec(`CREATE TABLE outbox_events (id UUID PRIMARY KEY DEFAULT gen_random_uuid(), aggregate_type TEXT NOT NULL,
		aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL, payload JSONB NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`)
	exec(`CREATE PUBLICATION pub FOR TABLE outbox_events WITH (publish = 'insert')`)

	t.Run("missing slot", func(t *testing.T) {
		info, err := replication.LookupSlot(ctx, pool, "nope")
		if err != nil || info.Exists {
			t.Fatalf("LookupSlot = %+v, %v; want no slot", info, err)
		}
	})

	t.Run("logical slot", func(t *testing.T) {
		exec(`SELECT pg_create_logical_replication_slot('logical', 'pgoutput')`)
		var confirmed, restart string
		err := pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, restart_lsn::text FROM pg_replication_slots WHERE slot_name = 'logical'`).
			Scan(&confirmed, &restart)
		if err != nil {
			t.Fatal(err)
		}
		info, err := replication.LookupSlot(ctx, pool, "logical")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Exists || info.Plugin != "pgoutput" || info.Database != "postgres" || info.WALStatus != "reserved" ||
			info.ConfirmedFlush == 0 || info.ConfirmedFlush.String() != confirmed || info.RestartLSN.String() != restart {
			t.Fatalf("LookupSlot = %+v; want pgoutput at %s (restart %s)", info, confirmed, restart)
		}
		if err := replication.CheckSlot(info, "logical", "postgres"); err != nil {
			t.Fatalf("CheckSlot: %v", err)
		}
	})

	t.Run("monitor: retained WAL and safe_wal_size", func(t *testing.T) {
		m := replication.NewMetrics(prometheus.NewRegistry())
		mon := replication.NewMonitor(pool, "logical", time.Hour, zerolog.Nop(), m)
		sample := func() float64 {
			t.Helper()
			if err := mon.Sample(ctx); err != nil {
				t.Fatal(err)
			}
			return testutil.ToFloat64(m.RetainedWAL)
		}
		walLSN := func() pglogrepl.LSN {
			t.Helper()
			var lsn pglogrepl.LSN
			if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&lsn); err != nil {
				t.Fatal(err)
			}
			return lsn
		}
		before := sample()
		if n := testutil.CollectAndCount(m.SafeWALSize); n != 0 {
			t.Errorf("safe_wal_size served (%d series) while max_slot_wal_keep_size is -1", n)
		}
		from := walLSN()
		exec(`CREATE TABLE filler AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 20000) g`)
		written := float64(walLSN() - from)
		// Each backend rereads the configuration on its own after
		// pg_reload_conf: sample until the limit shows.
		served := func(want int) {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				sample()
				n := testutil.CollectAndCount(m.SafeWALSize)
				if n == want {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("safe_wal_size: %d series served, want %d", n, want)
				}
			}
		}
		exec(`ALTER SYSTEM SET max_slot_wal_keep_size = '64MB'`)
		exec(`SELECT pg_reload_conf()`)
		served(1)
		after := sample()
		// Nothing reads the slot: its restart_lsn stays, so it retains at
		// least everything written since.
		if before < 0 || after-before < written {
			t.Errorf("retained WAL %v then %v bytes after writing %v", before, after, written)
		}
		safe := testutil.ToFloat64(m.SafeWALSize.WithLabelValues())
		if safe <= 0 || safe > float64(64<<20+16<<20) {
			t.Errorf("safe_wal_size %v bytes with max_slot_wal_keep_size 64MB", safe)
		}
		exec(`ALTER SYSTEM RESET max_slot_wal_keep_size`)
		exec(`SELECT pg_reload_conf()`)
		served(0)
	})

	t.Run("physical slot, NULL positions", func(t *testing.T) {
		exec(`SELECT pg_create_physical_replication_slot('physical')`)
		info, err := replication.LookupSlot(ctx, pool, "physical")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Exists || info.Plugin != "" || info.ConfirmedFlush != 0 || info.RestartLSN != 0 || info.LagBytes != 0 {
			t.Fatalf("LookupSlot = %+v; want a slot without plugin or positions", info)
		}
		err = replication.CheckSlot(info, "physical", "postgres")
		var fe *contract.FatalError
		if !errors.As(err, &fe) || errors.Is(err, contract.ErrGap) {
			t.Fatalf("CheckSlot = %v; want a FatalError that is not a gap", err)
		}
	})

	t.Run("slot dropped under the stream", func(t *testing.T) {
		s, err := replication.NewStream(replication.Config{Repl: repl, Slot: "dropped", Publication: "pub", Table: table},
			pool, zerolog.Nop(), replication.NewMetrics(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		err = s.Run(rctx, idleHandler{})
		if !errors.Is(err, contract.ErrGap) {
			t.Fatalf("Run = %v; want a gap", err)
		}
	})

	t.Run("start-up trace ends with the first session", func(t *testing.T) {
		// A stream whose sessions keep failing (here: nothing listens on
		// the replication port) retries for as long as it runs; the
		// start-up trace must stop at the first session, or it would
		// grow by a span per retry for the process's whole life.
		exec(`SELECT pg_create_logical_replication_slot('traced', 'pgoutput')`)
		port, err := devenv.FreePort() // free: nothing listens on it
		if err != nil {
			t.Fatal(err)
		}
		unreachable := repl.Copy()
		unreachable.Port = uint16(port)
		s, err := replication.NewStream(replication.Config{Repl: unreachable, Slot: "traced", Publication: "pub", Table: table},
			pool, zerolog.Nop(), replication.NewMetrics(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		trace := startup.New(time.Now(), zerolog.Nop())
		rctx, cancel := context.WithCancel(startup.NewContext(ctx, trace))
		done := make(chan error, 1)
		go func() { done <- s.Run(rctx, idleHandler{}) }()
		relaytest.WaitFor(t, 10*time.Second, "the trace finished after the first failed session", trace.Done)
		select {
		case err := <-done:
			t.Fatalf("Run returned %v while the server is unreachable; want it to retry", err)
		default:
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run after cancel = %v", err)
		}
	})

	t.Run("publication changed", func(t *testing.T) {
		if err := replication.CheckPublication(ctx, pool, table, "pub"); err != nil {
			t.Fatalf("CheckPublication on a good publication: %v", err)
		}
		exec(`ALTER PUBLICATION pub DROP TABLE outbox_events`)
		if err := replication.CheckPublication(ctx, pool, table, "pub"); !errors.Is(err, contract.ErrGap) {
			t.Fatalf("table removed: CheckPublication = %v; want a gap", err)
		}
		exec(`DROP PUBLICATION pub`)
		if err := replication.CheckPublication(ctx, pool, table, "pub"); !errors.Is(err, contract.ErrGap) {
			t.Fatalf("publication dropped: CheckPublication = %v; want a gap", err)
		}
	})
}

// idleHandler is a Handler for streams that must stop before any event.
type idleHandler struct{}

func (idleHandler) Event(*decode.Event) bool    { return true }
func (idleHandler) Room() <-chan struct{}       { return nil }
func (idleHandler) Commit(pglogrepl.LSN)        {}
func (idleHandler) Idle(pglogrepl.LSN)          {}
func (idleHandler) Drain(context.Context) error { return nil }
func (idleHandler) Flushed(context.Context, bool) (pglogrepl.LSN, error) {
	return 0, nil
}
