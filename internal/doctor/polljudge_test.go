package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/migrations"
)

var testPollOpts = PollOptions{Table: testOpts.Table, Slot: "outbox_relay", Notify: true, Batch: 500, MaxOutage: 2 * time.Minute}

// goodPoll is a polling setup with nothing to fix.
func goodPoll() pollFacts {
	cols := map[string]string{}
	for _, c := range pollColumns {
		cols[c] = "text"
	}
	return pollFacts{
		Database: "app", Role: "relay", Columns: cols,
		State:  migrations.PollState{SeqDefault: true, Index: true, Valid: true},
		Claims: true, Trigger: true, TriggerEnabled: true,
		Grants:        grantFacts{TableExists: true, SchemaUsage: true, TableSelect: true, Connect: true, Relay: []relayGrant{{Table: "x", Exists: true, Granted: true}}},
		ClaimsGranted: true, AdvisoryLock: true,
		MaxLocks: 64, MaxConnections: 100,
	}
}

func TestDoctorPollFindings(t *testing.T) {
	cases := []struct {
		name   string
		change func(*pollFacts, *PollOptions)
		check  string
		sev    Severity
		inFix  string
	}{
		{"no seq default", func(f *pollFacts, _ *PollOptions) { f.State.SeqDefault = false }, "postgres.poll_seq", Error, "outbox-relay migrate --source poll"},
		{"no index", func(f *pollFacts, _ *PollOptions) { f.State.Index, f.State.Valid = false, false }, "postgres.poll_index", Error, "outbox-relay migrate --source poll"},
		{"invalid index", func(f *pollFacts, _ *PollOptions) { f.State.Valid = false }, "postgres.poll_index", Error, "rebuilds"},
		{"columns missing", func(f *pollFacts, _ *PollOptions) { delete(f.Columns, "seq"); delete(f.Columns, "retry_after") }, "postgres.table", Error, "outbox-relay migrate"},
		{"nullable aggregate", func(f *pollFacts, _ *PollOptions) { f.NullableAggregate = []string{"aggregate_id"} }, "postgres.table", Error, `ALTER COLUMN "aggregate_id" SET NOT NULL`},
		{"claims dropped", func(f *pollFacts, _ *PollOptions) { f.Claims = false }, "postgres.poll_claims", Error, `CREATE TABLE IF NOT EXISTS "public".outbox_relay_poll_claims`},
		{"claims never migrated", func(f *pollFacts, _ *PollOptions) { f.Claims = false; delete(f.Columns, "seq") }, "postgres.poll_claims", Error, "outbox-relay migrate"},
		{"no trigger", func(f *pollFacts, _ *PollOptions) { f.Trigger, f.TriggerEnabled = false, false }, "postgres.poll_notify", Warn, "outbox-relay migrate --notify"},
		{"trigger disabled", func(f *pollFacts, _ *PollOptions) { f.TriggerEnabled = false }, "postgres.poll_notify", Warn, `ENABLE TRIGGER "outbox_events_insert_notify"`},
		{"no trigger, not meant", func(f *pollFacts, o *PollOptions) { f.Trigger, f.TriggerEnabled, o.Notify = false, false, false }, "postgres.poll_notify", Info, ""},
		{"no update", func(f *pollFacts, _ *PollOptions) { f.NoUpdate = []string{"processed_at"} }, "postgres.privileges", Error,
			`GRANT UPDATE (processed_at, attempts, retry_after, last_error) ON "public"."outbox_events" TO "relay"`},
		{"no claims rights", func(f *pollFacts, _ *PollOptions) { f.ClaimsGranted = false }, "postgres.privileges", Error, `ON "public"."outbox_relay_poll_claims" TO "relay"`},
		{"no advisory lock", func(f *pollFacts, _ *PollOptions) { f.AdvisoryLock = false }, "postgres.poll_advisory_locks", Error, "GRANT EXECUTE ON FUNCTION pg_catalog.pg_try_advisory_xact_lock(integer, integer)"},
		{"batch over a quarter of the lock table", func(_ *pollFacts, o *PollOptions) { o.Batch = 2000 }, "postgres.poll_advisory_locks", Warn, "max_locks_per_transaction = 81"},
		{"batch over the lock table", func(_ *pollFacts, o *PollOptions) { o.Batch = 6400 }, "postgres.poll_advisory_locks", Error, "lower --poll-batch"},
		{"WAL slot", func(f *pollFacts, _ *PollOptions) { f.WALSlot = true }, "postgres.poll_wal_slot", Error, "pg_drop_replication_slot('outbox_relay')"},
		{"idle timeout short", func(f *pollFacts, _ *PollOptions) { f.IdleTimeout = 5 * time.Second }, "postgres.poll_idle_timeout", Warn,
			`ALTER ROLE "relay" IN DATABASE "app" SET idle_in_transaction_session_timeout = 0`},
		{"idle timeout long", func(f *pollFacts, _ *PollOptions) { f.IdleTimeout = time.Hour }, "postgres.poll_idle_timeout", OK, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, o := goodPoll(), testPollOpts
			tc.change(&f, &o)
			got := find(pollFindings(f, o), tc.check)
			var match bool
			for _, g := range got {
				match = match || (g.Severity == tc.sev && strings.Contains(g.Fix, tc.inFix))
			}
			if !match {
				t.Errorf("want %s %s with fix containing %q, got %+v", tc.sev, tc.check, tc.inFix, got)
			}
		})
	}
	fs := pollFindings(goodPoll(), testPollOpts)
	if n := severities(fs); n[Error]+n[Warn] != 0 {
		t.Errorf("good polling setup: %+v", fs)
	}
	for _, c := range []string{"postgres.table", "postgres.poll_seq", "postgres.poll_index", "postgres.poll_claims", "postgres.poll_notify",
		"postgres.privileges", "postgres.poll_advisory_locks", "postgres.poll_wal_slot", "postgres.poll_idle_timeout"} {
		if got := find(fs, c); len(got) != 1 || got[0].Severity != OK {
			t.Errorf("good polling setup: %s = %+v", c, got)
		}
	}
	for _, c := range []string{"postgres.wal_level", "postgres.publication", "postgres.replication_slots", "postgres.slot"} {
		if got := find(fs, c); len(got) != 0 {
			t.Errorf("polling setup judged by the WAL relay's %s: %+v", c, got)
		}
	}
}

func TestDoctorPollDuplicateWindow(t *testing.T) {
	o := NATSOptions{Stream: testSpec, MaxOutage: time.Second, Payload: PGSummary{LargestPayload: 100, PayloadRows: 5},
		Poll: &PollTiming{Interval: time.Second, AckTimeout: 5 * time.Second}}
	for _, tc := range []struct {
		name   string
		window time.Duration
		exists bool
		sev    Severity
		inFix  string
	}{
		{"window covers", 2 * time.Minute, true, OK, ""},
		{"window short", 3 * time.Second, true, Warn, "nats stream edit OUTBOX --dupe-window 6s"},
		{"window of a stream to create", 3 * time.Second, false, Warn, "--duplicate-window 6s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, o := goodNATS(), o
			f.Stream.Duplicates, f.StreamExists, o.Stream.DuplicateWindow = tc.window, tc.exists, tc.window
			got := find(natsFindings(f, o), "nats.poll_duplicate_window")
			if len(got) != 1 || got[0].Severity != tc.sev || !strings.Contains(got[0].Fix, tc.inFix) {
				t.Errorf("want one %s with fix containing %q, got %+v", tc.sev, tc.inFix, got)
			}
		})
	}
	o.Poll = nil
	if got := find(natsFindings(goodNATS(), o), "nats.poll_duplicate_window"); len(got) != 0 {
		t.Errorf("WAL mode judged by the polling window: %+v", got)
	}
}

func TestDoctorPGDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "500ms": 500 * time.Millisecond, "5s": 5 * time.Second, "10min": 10 * time.Minute, "1h": time.Hour, "2d": 48 * time.Hour, "1500": 1500 * time.Millisecond} {
		if got, err := pgDuration(in); err != nil || got != want {
			t.Errorf("pgDuration(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := pgDuration("5 parsecs"); err == nil {
		t.Error("pgDuration accepts nonsense")
	}
}
