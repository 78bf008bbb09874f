package takeup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestGapSlotAdvancedByHand: while the relay is stopped (SIGTERM: it
// drains, confirms its final position and records it), someone moves its
// slot on by hand past events the stream lacks, by less WAL than
// checkpoint.Slack: with pg_replication_slot_advance, or by consuming the
// changes with pg_logical_slot_get_binary_changes. The relay refuses to
// go on, since the slot is beyond exactly where it stopped, and the
// repair publishes the events the slot skipped. Before the check was
// exact, the slack hid such a move: the relay streamed on and the events
// were lost.
func TestGapSlotAdvancedByHand(t *testing.T) {
	for _, c := range []struct{ name, advance string }{
		{"slot_advance", `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`},
		{"get_changes", `SELECT count(*) FROM pg_logical_slot_get_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := suite.NewEnv(t)
			r := suite.StartRelay(t, env)
			r.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
			env.Tx(relaytest.NewRow("order", "1", "before", `{}`))
			env.WaitStored(1, relaytest.FaultWait)
			env.WaitSlotCaughtUp(relaytest.FaultWait)
			relaytest.StopRelay(t, r)
			relaytest.WaitFor(t, relaytest.FaultWait, "the walsender gone", func() bool { return env.SlotInfo().ActivePID == 0 })

			skipped := env.Tx(relaytest.NewRow("order", "1", "skipped", `{}`), relaytest.NewRow("order", "2", "skipped", `{}`))
			args := []any{env.Slot}
			if strings.Contains(c.advance, "$2") {
				args = append(args, env.Pub)
			}
			env.Exec(c.advance, args...)
			moved := env.SlotInfo().ConfirmedFlush
			limit := recordedLimit(t, env)
			if moved > limit+checkpoint.Slack {
				t.Fatalf("the slot moved to %s, beyond the recorded limit %s plus the slack: the test does not test what the slack hid", moved, limit)
			}
			t.Logf("the slot moved by hand to %s; the relay's recorded limit is %s", moved, limit)

			again := suite.StartRelay(t, env)
			refusedOrStreaming(t, again)
			for _, want := range []string{"advanced by hand", "--recreate-slot"} {
				if !strings.Contains(again.Logs(), want) {
					t.Errorf("the refusal does not mention %q:\n%s", want, again.Logs())
				}
			}
			fixed := repair(t, env)
			finish(t, env, fixed, relaytest.Expect{})
			if stored := relaytest.StoredByID(t, env); stored[skipped[0]] == nil || stored[skipped[1]] == nil {
				t.Error("the repair did not publish the events the slot skipped")
			}
		})
	}
}

// refusedOrStreaming waits until r exits, which it must, non-zero, or
// streams, which fails the test at once.
func refusedOrStreaming(t *testing.T, r *relaytest.Relay) {
	t.Helper()
	relaytest.WaitFor(t, relaytest.FaultWait, "the relay to refuse or stream", func() bool {
		return r.Exited() || strings.Contains(r.Logs(), relaytest.LogStreaming)
	})
	if !r.Exited() {
		t.Fatalf("the relay streams from a slot moved by hand; log:\n%s", r.Logs())
	}
	if code := r.Wait(time.Second); code == 0 {
		t.Fatalf("the relay exited 0; log:\n%s", r.Logs())
	}
}

// recordedLimit reads the relay's recorded confirm limit.
func recordedLimit(t *testing.T, env *relaytest.Env) pglogrepl.LSN {
	t.Helper()
	var limit string
	if err := env.Pool.QueryRow(context.Background(), `SELECT confirm_limit::text FROM `+env.Table.Schema+`.outbox_relay_slots WHERE slot_name = $1`, env.Slot).Scan(&limit); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(limit)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// TestSlotMovesAfterACleanStop: where the relay stopped cleanly bounds
// the slot only until a relay streams from it again. A relay stops
// cleanly; the next one streams, confirms further and is SIGKILLed (no
// clean stop: nothing recorded); a third one must resume, not take the
// slot for one moved by hand.
func TestSlotMovesAfterACleanStop(t *testing.T) {
	env := suite.NewEnv(t)
	first := suite.StartRelay(t, env)
	first.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	env.Tx(relaytest.NewRow("order", "1", "first", `{}`))
	env.WaitStored(1, relaytest.FaultWait)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	relaytest.StopRelay(t, first)
	relaytest.RequireLog(t, first, logRecordedStop, 1)
	stopped := env.SlotInfo().ConfirmedFlush

	second := suite.StartRelay(t, env)
	second.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	env.Tx(relaytest.NewRow("order", "1", "second", `{}`))
	env.WaitStored(2, relaytest.FaultWait)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	if moved := env.SlotInfo().ConfirmedFlush; moved <= stopped {
		t.Fatalf("the second relay confirmed %s, not past where the first stopped (%s)", moved, stopped)
	}
	second.Kill()

	third := suite.StartRelay(t, env)
	third.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	env.Tx(relaytest.NewRow("order", "1", "third", `{}`))
	finish(t, env, third, relaytest.Expect{})
}

// logRecordedStop is the relay's line once it recorded where it stopped.
const logRecordedStop = "recorded where the relay stopped"

// TestSlotAdvancedAfterAKillWithinTheSlack is what docs/guarantees.md
// says is not detected: after a stop that was not clean (SIGKILL),
// nothing records exactly where the relay stopped, and a slot moved by
// hand less than checkpoint.Slack past the recorded limit is taken for
// the relay's own work. The relay streams on; the events the slot skipped
// are missing, and `outbox-relay verify` lists them.
func TestSlotAdvancedAfterAKillWithinTheSlack(t *testing.T) {
	env := suite.NewEnv(t)
	r := suite.StartRelay(t, env)
	r.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	env.Tx(relaytest.NewRow("order", "1", "before", `{}`))
	env.WaitStored(1, relaytest.FaultWait)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	r.Kill()
	relaytest.WaitFor(t, relaytest.FaultWait, "the walsender gone", func() bool { return env.SlotInfo().ActivePID == 0 })

	skipped := env.Tx(relaytest.NewRow("order", "1", "skipped", `{}`), relaytest.NewRow("order", "2", "skipped", `{}`))
	env.Exec(`SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, env.Slot)
	if moved, limit := env.SlotInfo().ConfirmedFlush, recordedLimit(t, env); moved > limit+checkpoint.Slack {
		t.Fatalf("the slot moved to %s, beyond the recorded limit %s plus the slack: the test does not test what the slack hides", moved, limit)
	}
	again := suite.StartRelay(t, env)
	again.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	env.Tx(relaytest.NewRow("order", "1", "after", `{}`))
	env.WaitStored(2, relaytest.FaultWait)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	again.Drain(30 * time.Second)
	out, err := suite.Relay.RunCLI(t, append([]string{"verify"}, env.ToolArgs()...)...)
	if err == nil {
		t.Fatalf("verify found nothing missing after the slot skipped 2 events:\n%s", out)
	}
	for _, id := range skipped {
		if !strings.Contains(out, id) {
			t.Errorf("verify does not list the skipped event %s as missing:\n%s", id, out)
		}
	}
}
