package takeup

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// What the stream holds is decided by the events (their Postgres system,
// table and id), never by the slot's name: the cases of a slot renamed, a
// second deployment, an old slot resumed, and a second relay started on a
// table another one streams.

// withSlot is env with another slot name: a relay started on it is another
// deployment of the same table, stream and subjects.
func withSlot(env *relaytest.Env, slot string) *relaytest.Env {
	e := *env
	e.Slot = slot
	return &e
}

// rows writes n one-row transactions and returns their ids.
func rows(env *relaytest.Env, n int, eventType string) []string {
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, env.Tx(relaytest.NewRow("order", fmt.Sprint(i%3), eventType, `{}`))...)
	}
	return ids
}

// logIdleSlot is the relay's warning about another slot of its table that
// nothing streams from.
const logIdleSlot = "another slot recorded for this table exists and no relay streams from it"

// TestRenamedSlotPublishesOnlyWhatTheStreamLacks: a relay streamed 30
// events and stopped; 2 rows were committed while no relay ran; past the
// 1 s duplicate window a relay starts under a new slot name (a renamed
// OUTBOX_SLOT, a second deployment). It must publish, from its slot's
// snapshot, exactly the 2 rows the stream lacks (before the fix: every
// unprocessed row, 32, all stored twice but the 2). doctor, status and the
// new relay's metrics then name the old slot, which keeps WAL, with the
// SQL that drops it. Then the new relay stops and the old slot is resumed,
// past the window: its replay holds the new slot's streamed events and the
// rows it published from the table, and it must skip all of them (before
// the fix: only its own slot's messages counted, and it stored them twice).
func TestRenamedSlotPublishesOnlyWhatTheStreamLacks(t *testing.T) {
	env := suite.NewEnv(t)
	a := suite.StartRelay(t, env)
	a.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	rows(env, 30, "before.rename")
	env.WaitStored(30, time.Minute)
	relaytest.StopRelay(t, a)
	rows(env, 2, "while.stopped") // the stream lacks them; the old slot keeps them
	time.Sleep(2 * env.DuplicateWindow)

	v2 := withSlot(env, env.Slot+"_v2")
	b := suite.StartRelay(t, v2)
	b.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	if got, ok := relaytest.LogNumber(b, logBootstrapped, "published"); !ok || got != 2 {
		t.Errorf("the relay on the new slot published %v rows from the table (logged: %v), want the 2 the stream lacked", got, ok)
	}
	relaytest.RequireLog(t, b, logIdleSlot, 1)
	rows(env, 3, "after.rename")
	env.WaitStored(35, time.Minute)
	v2.WaitSlotCaughtUp(relaytest.FaultWait)
	requireIdleSlotReported(t, v2, b, env.Slot)
	res := env.CheckWith(relaytest.Expect{})
	t.Logf("after the rename: %s", res)

	relaytest.StopRelay(t, b)
	time.Sleep(2 * env.DuplicateWindow)
	a = suite.StartRelay(t, env)
	a.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, a, logIdleSlot, 1) // the v2 slot, now
	relaytest.RequireLog(t, a, relaytest.LogSkipStored, 1)
	rows(env, 1, "after.resume")
	res = finish(t, env, a, relaytest.Expect{})
	if res.Rows != 36 || res.Messages != 36 {
		t.Errorf("%d rows, %d messages; want 36 of each", res.Rows, res.Messages)
	}
}

// requireIdleSlotReported: doctor (a warning with the SQL that drops it),
// status (a problem, and the slot in --json's other_slots) and the
// relay's metric name the idle slot and the WAL it keeps.
func requireIdleSlotReported(t *testing.T, env *relaytest.Env, r *relaytest.Relay, idle string) {
	t.Helper()
	drop := fmt.Sprintf("SELECT pg_drop_replication_slot('%s'); DELETE FROM \"public\".\"outbox_relay_slots\" WHERE slot_name = '%s';", idle, idle)
	out, _ := suite.Relay.RunCLI(t, append([]string{"doctor"}, env.ToolArgs()...)...)
	if !strings.Contains(out, "postgres.other_slots") || !strings.Contains(out, drop) || !strings.Contains(out, "no relay streams from it") {
		t.Errorf("doctor does not report the idle slot %q with the SQL that drops it:\n%s", idle, out)
	}
	stdout, stderr, code := suite.Relay.RunSplit(t, append([]string{"status", "--json"}, env.ToolArgs()...)...)
	var st struct {
		OtherSlots []struct {
			Slot          string `json:"slot"`
			Table         string `json:"table"`
			Exists        bool   `json:"exists"`
			Active        bool   `json:"active"`
			RetainedBytes int64  `json:"retained_bytes"`
		} `json:"other_slots"`
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil || code != 1 {
		t.Errorf("status --json with an idle slot of the table: exit %d (want 1), %v:\n%s%s", code, err, stdout, stderr)
	}
	found := false
	for _, o := range st.OtherSlots {
		found = found || (o.Slot == idle && o.Table == env.Table.String() && o.Exists && !o.Active && o.RetainedBytes > 0)
	}
	if !found || !strings.Contains(strings.Join(st.Problems, "\n"), drop) {
		t.Errorf("status --json does not show the idle slot %q keeping WAL, with the SQL that drops it:\n%s", idle, stdout)
	}
	series := fmt.Sprintf(`outbox_relay_idle_slot_retained_bytes{slot=%q,table=%q}`, idle, env.Table.String())
	relaytest.WaitFor(t, time.Minute, series, func() bool {
		v, err := r.Metric(series)
		return err == nil && v > 0
	})
}

// TestSecondRelayOnTheTableRefused: while a relay streams the table, a
// relay started on it under another slot stops at once, non-zero, naming
// the slot that streams and the fix, before it creates a slot or publishes
// anything; the first relay streams on, nothing stored twice. The same
// holds the other way round: with the second relay streaming (the first
// stopped meanwhile), the first one is refused when it comes back.
func TestSecondRelayOnTheTableRefused(t *testing.T) {
	env := suite.NewEnv(t)
	a := suite.StartRelay(t, env)
	a.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	rows(env, 20, "first")
	env.WaitStored(20, time.Minute)
	time.Sleep(2 * env.DuplicateWindow)

	v2 := withSlot(env, env.Slot+"_v2")
	requireRefused(t, v2, env.Slot)
	if v2.SlotInfo().Exists {
		t.Errorf("the refused relay created its slot %q", v2.Slot)
	}
	rows(env, 5, "after.refusal")
	env.WaitStored(25, time.Minute)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	relaytest.StopRelay(t, a)

	b := suite.StartRelay(t, v2)
	b.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	requireRefused(t, env, v2.Slot)
	rows(env, 5, "second")
	finish(t, v2, b, relaytest.Expect{})
}

// requireRefused starts a relay on env that must stop at once, non-zero,
// saying which slot streams the table and how to go on.
func requireRefused(t *testing.T, env *relaytest.Env, streaming string) {
	t.Helper()
	r := suite.StartRelay(t, env)
	if code := r.Wait(relaytest.FaultWait); code == 0 {
		t.Fatalf("a relay on slot %q started while slot %q streams the table", env.Slot, streaming)
	}
	for _, want := range []string{
		fmt.Sprintf(`another relay streams table %s: slot \"%s\"`, env.Table, streaming),
		"--slot " + streaming,
		fmt.Sprintf("pg_drop_replication_slot('%s')", streaming),
	} {
		if !strings.Contains(r.Logs(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, r.Logs())
		}
	}
	if strings.Contains(r.Logs(), logBootstrapped) {
		t.Errorf("the refused relay published from the table:\n%s", r.Logs())
	}
}

// TestSecondRelayStopsAtItsNextSession: a relay whose take-up saw no
// other relay of its table (the other was cut off from Postgres then, its
// slot inactive) meets it at the start of its next replication session,
// and stops there, before it reads anything: relay A is cut off from
// Postgres, relay B takes the table up meanwhile (its warning names A's
// idle slot) and streams; when A's network comes back, A's next session
// holds its slot, sees B's active, and A exits non-zero with the fix.
// B streams on; nothing is stored twice.
func TestSecondRelayStopsAtItsNextSession(t *testing.T) {
	env := suite.NewEnv(t)
	proxy := relaytest.ProxySide(t, env, "postgres")
	a := suite.StartRelay(t, env)
	a.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	rows(env, 10, "before.cut")
	env.WaitStored(10, time.Minute)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	proxy.Cut()
	relaytest.WaitFor(t, relaytest.FaultWait, "relay A's slot inactive", func() bool { return !env.SlotInfo().Active })

	v2 := withSlot(env, env.Slot+"_v2")
	v2.RelayPG = "" // B reaches Postgres directly
	b := suite.StartRelay(t, v2)
	b.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, b, logIdleSlot, 1)
	proxy.Restore()
	if code := a.Wait(relaytest.FaultWait); code == 0 {
		t.Fatal("relay A went on streaming beside relay B")
	}
	if want := fmt.Sprintf(`another relay streams table %s: slot \"%s\"`, env.Table, v2.Slot); !strings.Contains(a.Logs(), want) {
		t.Errorf("relay A's log does not say %q:\n%s", want, a.Logs())
	}
	rows(env, 5, "after.cut")
	finish(t, v2, b, relaytest.Expect{})
}
