package takeup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
	"github.com/outbox-relay/outbox-relay/verify"
)

// TestFailoverKeepalivesBeyondFork (Postgres 17+): without
// synchronized_standby_slots, the relay confirms on the primary keepalive
// positions the standby never receives: its link to the primary is cut,
// and only another table is written (no outbox event beyond the fork, so
// the relay has no reason to stop). The primary dies and the standby is
// promoted; the relay goes on from it, on the new timeline. Nothing of the
// old timeline may be confirmed there beyond the fork point: the new
// primary's slot never gets ahead of the WAL it has written, and rows it
// commits at positions the relay had confirmed on the old timeline are
// published, also after the session ends and the relay reconnects.
// Before the fix, the session's first status update confirmed the old
// timeline's keepalive position on the new primary, and the next session,
// starting there, skipped those rows.
func TestFailoverKeepalivesBeyondFork(t *testing.T) {
	pair := relaytest.StartPair(t, relaytest.PairOptions{Failover: true})
	env := relaytest.NewEnv(t, pair)
	relay := suite.StartRelay(t, env, "--failover", "--status-interval", "1s")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, relay, "synchronized_standby_slots is empty", 1)
	env.Tx(relaytest.NewRow("t", "a1", "before", `{"n": 1}`))
	env.WaitRows(relaytest.FaultWait)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	pair.WaitSlotSynced(env.Slot)
	pair.WaitReplayed()

	// Other tables are busy on the primary, and the standby receives none
	// of it: the relay confirms keepalive positions beyond the fork.
	pair.Link.Cut()
	env.Exec(`CREATE TABLE filler (n int, pad text)`)
	env.Exec(`INSERT INTO filler SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g`)
	beyond := env.WALPosition()
	relaytest.WaitFor(t, relaytest.FaultWait, "the relay to confirm the primary's keepalives past "+beyond.String(), func() bool {
		return env.SlotInfo().ConfirmedFlush >= beyond
	})
	confirmedOld := env.SlotInfo().ConfirmedFlush

	sessions := relay.CountLog(relaytest.LogStreaming)
	if err := pair.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pair.Standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	relay.WaitLog(logTimelineChanged, 2*relaytest.FaultWait)
	relaytest.WaitLogCount(t, relay, relaytest.LogStreaming, sessions+1, relaytest.FaultWait)
	fork := forkPoint(t, pair)
	if fork >= beyond {
		t.Fatalf("the standby forked at %s, not before the primary's WAL at %s: the test wrote nothing the standby lacks", fork, beyond)
	}
	t.Logf("the relay confirmed %s on timeline 1; the standby forked at %s", confirmedOld, fork)

	// The relay's session on the new primary reports its position (every
	// second): the slot must not be beyond what that server has written.
	streaming := time.Now()
	newPrimary := pair.Standby.URL(env.Database)
	pair.WaitTrue("a status update of the relay on the new primary", newPrimary,
		`SELECT count(*) > 0 FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid
		WHERE s.slot_name = $1 AND r.reply_time > $2`, env.Slot, streaming)
	confirmed, written := slotAndWAL(t, newPrimary, env.Slot)
	t.Logf("on the new primary: the slot confirmed %s, the WAL written up to %s", confirmed, written)
	if confirmed > written {
		t.Errorf("the relay confirmed %s on the new timeline, beyond its WAL (%s) and its fork point (%s): the old timeline's position %s survived the failover",
			confirmed, written, fork, confirmedOld)
	}

	// The session ends (its walsender terminated) and the relay
	// reconnects: the slot's confirmed position is where the new session
	// starts. Rows committed from then on sit at positions the relay had
	// confirmed on the old timeline; the relay must publish them.
	sessions = relay.CountLog(relaytest.LogStreaming)
	terminateWalsender(t, newPrimary, env.Slot)
	relaytest.WaitLogCount(t, relay, relaytest.LogStreaming, sessions+1, relaytest.FaultWait)
	var after []string
	for i := 0; i < 10; i++ {
		after = append(after, txRetryIDs(t, env, relaytest.NewRow("t", "a2", "after", fmt.Sprintf(`{"n": %d}`, i)))...)
	}
	if _, written := slotAndWAL(t, newPrimary, env.Slot); written >= confirmedOld {
		t.Fatalf("the new timeline's rows end at %s, past the old timeline's confirmed %s: the test does not reach the positions it means to", written, confirmedOld)
	}
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	relay.Drain(30 * time.Second)

	rep, err := verify.Run(ctx, env.Pool, jssink.NewReader(env.JS, env.StreamHandle(10*time.Second), "outbox.>", env.DeadSubj, nil), verify.Options{Table: env.Table})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("check: %d rows, %d messages; missing %d, extra %d, duplicated %d", rep.Rows, rep.Messages, len(rep.Missing), len(rep.Extra), len(rep.Duplicates))
	if len(rep.Missing) > 0 || len(rep.Duplicates) > 0 || len(rep.Extra) > 0 {
		t.Errorf("after the failover: missing %v (of the %d rows committed on the new timeline), extra %v, duplicated %v", rep.Missing, len(after), rep.Extra, rep.Duplicates)
	}
}

// txRetryIDs is txRetry, returning the rows' ids.
func txRetryIDs(t *testing.T, env *relaytest.Env, rows ...relaytest.Row) []string {
	t.Helper()
	deadline := time.Now().Add(relaytest.FaultWait)
	for {
		ids, err := env.TryTx(rows...)
		if err == nil {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("write after the failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// forkPoint reads, on the promoted standby, where timeline 1 ended: its
// history file's first line.
func forkPoint(t *testing.T, pair *relaytest.Pair) pglogrepl.LSN {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pair.Standby.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var tli, fork string
	err = conn.QueryRow(ctx, `SELECT tli, split_part(pg_read_file('pg_wal/' || tli || '.history'), E'\t', 2)
		FROM (SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) AS tli) t`).Scan(&tli, &fork)
	if err != nil {
		t.Fatalf("read the promoted standby's timeline history: %v", err)
	}
	lsn, err := pglogrepl.ParseLSN(fork)
	if err != nil {
		t.Fatalf("timeline %s's history names fork point %q: %v", tli, fork, err)
	}
	return lsn
}

// slotAndWAL reads the slot's confirmed position and the WAL written so
// far on the server at url.
func slotAndWAL(t *testing.T, url, slot string) (confirmed, written pglogrepl.LSN) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var c, w string
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, pg_current_wal_lsn()::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&c, &w); err != nil {
		t.Fatalf("read slot %s: %v", slot, err)
	}
	if confirmed, err = pglogrepl.ParseLSN(c); err == nil {
		written, err = pglogrepl.ParseLSN(w)
	}
	if err != nil {
		t.Fatal(err)
	}
	return confirmed, written
}

// terminateWalsender ends the session that holds slot on the server at
// url, as a network fault or an operator would.
func terminateWalsender(t *testing.T, url, slot string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ended bool
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`, slot).Scan(&ended); err != nil || !ended {
		t.Fatalf("terminate the walsender of slot %s: %v (terminated: %v)", slot, err, ended)
	}
}
