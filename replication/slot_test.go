package replication_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/replication"
)

// TestSlotsAndGapsOnRealPostgres reads slots as pg_replication_slots shows
// them (LSNs scanned straight into pglogrepl.LSN, NULLs included) and checks
// that each way the library notices a gap wraps ErrGap.
func TestSlotsAndGapsOnRealPostgres(t *testing.T) {
	cluster, err := relaytest.StartCluster(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() })
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
	table := decode.Table{Schema: "public", Name: "outbox_events"}
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
		var fe *replication.FatalError
		if !errors.As(err, &fe) || errors.Is(err, replication.ErrGap) {
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
		if !errors.Is(err, replication.ErrGap) {
			t.Fatalf("Run = %v; want a gap", err)
		}
	})

	t.Run("publication changed", func(t *testing.T) {
		if err := replication.CheckPublication(ctx, pool, table, "pub"); err != nil {
			t.Fatalf("CheckPublication on a good publication: %v", err)
		}
		exec(`ALTER PUBLICATION pub DROP TABLE outbox_events`)
		if err := replication.CheckPublication(ctx, pool, table, "pub"); !errors.Is(err, replication.ErrGap) {
			t.Fatalf("table removed: CheckPublication = %v; want a gap", err)
		}
		exec(`DROP PUBLICATION pub`)
		if err := replication.CheckPublication(ctx, pool, table, "pub"); !errors.Is(err, replication.ErrGap) {
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
