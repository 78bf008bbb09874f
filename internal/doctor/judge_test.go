package doctor

import (
	"strings"
	"testing"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

var testOpts = PGOptions{Table: contract.Table{Schema: "public", Name: "outbox_events"}, Publication: "outbox_pub", Slot: "outbox_relay", StatusInterval: 10 * time.Second}

// goodPG is a setup with nothing to fix: an active slot, the relay's grants.
func goodPG() pgFacts {
	return pgFacts{
		Version: 150000, Database: "app",
		Role: replication.Role{Name: "relay", Replication: true},
		Settings: map[string]string{"max_replication_slots": "10", "max_wal_senders": "10",
			"max_slot_wal_keep_size": "-1", "wal_sender_timeout": "60000"},
		SlotsUsed: 1, SendersUsed: 1,
		Pub:    pubFacts{Exists: true, Insert: true},
		Grants: grantFacts{TableExists: true, SchemaUsage: true, TableSelect: true, Connect: true, Relay: []relayGrant{{Table: "x", Exists: true, Granted: true}}},
		Slot:   replication.SlotInfo{Exists: true, Plugin: "pgoutput", Database: "app", Active: true, ActivePID: 7, WALStatus: "reserved"},
	}
}

func find(fs []Finding, check string) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

func severities(fs []Finding) map[Severity]int {
	m := map[Severity]int{}
	for _, f := range fs {
		m[f.Severity]++
	}
	return m
}

func TestPGFindings(t *testing.T) {
	cases := []struct {
		name    string
		change  func(*pgFacts)
		check   string
		sev     Severity
		inFix   string
		options func(*PGOptions)
	}{
		{"good", func(*pgFacts) {}, "postgres.slot", OK, "", nil},
		{"unbounded WAL", func(*pgFacts) {}, "postgres.max_slot_wal_keep_size", Warn, "max_slot_wal_keep_size = '50GB'", nil},
		{"bounded WAL", func(f *pgFacts) { f.Settings["max_slot_wal_keep_size"] = "1024" }, "postgres.max_slot_wal_keep_size", Warn, "1.0 GiB", nil},
		{"no free slot", func(f *pgFacts) { f.Slot = replication.SlotInfo{}; f.SlotsUsed = 10 }, "postgres.replication_slots", Error, "max_replication_slots = 12", nil},
		{"no free sender", func(f *pgFacts) { f.Slot.Active = false; f.SendersUsed = 10 }, "postgres.wal_senders", Error, "max_wal_senders = 12", nil},
		{"sender timeout off", func(f *pgFacts) { f.Settings["wal_sender_timeout"] = "0" }, "postgres.wal_sender_timeout", Warn, "wal_sender_timeout = '60s'", nil},
		{"sender timeout short", func(f *pgFacts) { f.Settings["wal_sender_timeout"] = "5000" }, "postgres.wal_sender_timeout", Info, "", nil},
		{"update and delete published", func(f *pgFacts) { f.Pub.Update, f.Pub.Delete = true, true }, "postgres.publication_actions", Warn, "SET (publish = 'insert')", nil},
		{"all tables", func(f *pgFacts) { f.Pub.AllTables = true }, "postgres.publication_tables", Warn, "CREATE PUBLICATION", nil},
		{"rds flag off", func(f *pgFacts) { f.Settings["rds.logical_replication"] = "0" }, "postgres.managed", Error, "parameter group", nil},
		{"cloudsql flag on", func(f *pgFacts) { f.Settings["cloudsql.logical_decoding"] = "on" }, "postgres.managed", OK, "", nil},
		{"no SELECT", func(f *pgFacts) { f.Grants.TableSelect = false }, "postgres.privileges", Error, `GRANT SELECT ON "public"."outbox_events" TO "relay"`, nil},
		{"no CONNECT", func(f *pgFacts) { f.Grants.Connect = false }, "postgres.privileges", Error, `GRANT CONNECT ON DATABASE "app"`, nil},
		{"relay records not granted", func(f *pgFacts) { f.Grants.Relay[0].Granted = false }, "postgres.privileges", Error, "GRANT", nil},
		{"slot inactive", func(f *pgFacts) { f.Slot.Active = false }, "postgres.slot", Warn, "pg_drop_replication_slot('outbox_relay')", nil},
		{"slot lost", func(f *pgFacts) { f.Slot.WALStatus = "lost" }, "postgres.slot", Error, "--recreate-slot", nil},
		{"slot unreserved", func(f *pgFacts) { f.Slot.WALStatus = "unreserved" }, "postgres.slot", Error, "max_slot_wal_keep_size", nil},
		{"slot invalidated", func(f *pgFacts) { f.Invalidated = "rows_removed" }, "postgres.slot", Error, "--recreate-slot", nil},
		{"slot of another plugin", func(f *pgFacts) { f.Slot.Plugin = "wal2json" }, "postgres.slot", Error, "pgoutput", nil},
		{"no other slot", func(*pgFacts) {}, "postgres.other_slots", OK, "", nil},
		{"another slot of the table idle", func(f *pgFacts) {
			f.Others = []checkpoint.OtherSlot{{Slot: "outbox_relay_old", Table: "public.outbox_events", Exists: true, RetainedBytes: 3 << 20}}
		}, "postgres.other_slots", Warn, `SELECT pg_drop_replication_slot('outbox_relay_old'); DELETE FROM "public"."outbox_relay_slots" WHERE slot_name = 'outbox_relay_old';`, nil},
		{"another slot of the table streams", func(f *pgFacts) {
			f.Others = []checkpoint.OtherSlot{{Slot: "outbox_relay_v2", Table: "public.outbox_events", Exists: true, Active: true, ActivePID: 9}}
		}, "postgres.other_slots", Error, "--slot outbox_relay_v2", nil},
		{"another table's slot idle", func(f *pgFacts) {
			f.Others = []checkpoint.OtherSlot{{Slot: "outbox2_relay", Table: "public.outbox2", Exists: true}}
		}, "postgres.other_slots", Info, "", nil},
		{"other slots unreadable", func(f *pgFacts) { f.OthersErr = `column "outbox_table" does not exist` }, "postgres.other_slots", Warn, "outbox-relay migrate", nil},
		{"rds_replication member", func(f *pgFacts) { f.Role = replication.Role{Name: "relay", RDSReplication: true} }, "postgres.role", OK, "", nil},
		{"preflight problem", func(f *pgFacts) {
			f.Preflight = []replication.Problem{{Check: replication.ProblemWALLevel, What: "wal_level is replica", Fix: "ALTER SYSTEM SET wal_level = logical"}}
		}, "postgres.wal_level", Error, "ALTER SYSTEM SET wal_level = logical", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := goodPG()
			tc.change(&f)
			o := testOpts
			fs := pgFindings(f, o)
			got := find(fs, tc.check)
			if len(got) == 0 {
				t.Fatalf("no finding %s in %+v", tc.check, fs)
			}
			var match bool
			for _, g := range got {
				if g.Severity == tc.sev && strings.Contains(g.Fix, tc.inFix) {
					match = true
				}
			}
			if !match {
				t.Errorf("want %s %s with fix containing %q, got %+v", tc.sev, tc.check, tc.inFix, got)
			}
		})
	}
	// The good setup has no error, and each check once at least.
	fs := pgFindings(goodPG(), testOpts)
	if n := severities(fs)[Error]; n != 0 {
		t.Errorf("good setup has %d errors: %+v", n, fs)
	}
	for _, c := range []string{"postgres.wal_level", "postgres.role", "postgres.publication", "postgres.table", "postgres.replication_slots", "postgres.wal_senders", "postgres.privileges"} {
		if len(find(fs, c)) != 1 || find(fs, c)[0].Severity != OK {
			t.Errorf("good setup: %s = %+v", c, find(fs, c))
		}
	}
}

var testSpec = jssink.StreamSpec{Name: "OUTBOX", Template: mustTemplate("outbox.{aggregate_type}.{event_type}"), DeadLetterSubject: "outbox_dead_letter"}

func mustTemplate(s string) sink.Template {
	t, err := sink.ParseTemplate(s)
	if err != nil {
		panic(err)
	}
	return t
}

func goodNATS() natsFacts {
	return natsFacts{Server: "n1 2.11", MaxPayload: 1 << 20, StreamExists: true,
		Stream: jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.*.*", "outbox_dead_letter"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: 1},
		Sync:   &syncPolicy{Always: true}}
}

func TestNATSFindings(t *testing.T) {
	opts := NATSOptions{Stream: testSpec, Payload: PGSummary{LargestPayload: 100, PayloadRows: 5}}
	cases := []struct {
		name   string
		change func(*natsFacts, *NATSOptions)
		check  string
		sev    Severity
		inFix  string
	}{
		{"good", func(*natsFacts, *NATSOptions) {}, "nats.duplicate_window", OK, ""},
		{"no JetStream", func(f *natsFacts, _ *NATSOptions) { f.JetStreamErr = jetstream.ErrJetStreamNotEnabled }, "nats.jetstream", Error, "-js"},
		{"window shorter than the outage", func(f *natsFacts, o *NATSOptions) { o.MaxOutage = 10 * time.Minute }, "nats.duplicate_window", Error, "nats stream edit OUTBOX --dupe-window 10m"},
		{"window of a stream to create", func(f *natsFacts, o *NATSOptions) {
			f.StreamExists = false
			o.Stream.DuplicateWindow = time.Second
		}, "nats.duplicate_window", Error, "--duplicate-window 2m"},
		{"missing stream", func(f *natsFacts, _ *NATSOptions) { f.StreamExists = false }, "nats.stream", Info, ""},
		{"subjects taken by another stream", func(f *natsFacts, _ *NATSOptions) { f.StreamExists, f.SubjectOwner = false, "ORDERS" }, "nats.stream", Error, "--stream ORDERS"},
		{"memory storage", func(f *natsFacts, _ *NATSOptions) {
			f.Problems = []jssink.StreamProblem{{Kind: "storage", What: "memory", Fix: "nats stream rm OUTBOX"}}
		}, "nats.stream_storage", Error, "nats stream rm"},
		{"discard old", func(f *natsFacts, _ *NATSOptions) {
			f.Problems = []jssink.StreamProblem{{Kind: "discard", What: "old", Fix: "--discard new"}}
		}, "nats.stream_discard", Warn, "--discard new"},
		{"one replica in a cluster", func(f *natsFacts, _ *NATSOptions) { f.Cluster = "c1" }, "nats.replicas", Warn, "--replicas 3"},
		{"payload too large for the server", func(f *natsFacts, o *NATSOptions) { o.Payload.LargestPayload = 1 << 20 }, "nats.max_message_size", Error, "max_payload: 2097152"},
		{"payload too large for the stream", func(f *natsFacts, o *NATSOptions) { f.Stream.MaxMsgSize = 512 }, "nats.max_message_size", Error, "--max-msg-size 1048576"},
		{"no rows", func(f *natsFacts, o *NATSOptions) { o.Payload = PGSummary{} }, "nats.max_message_size", Info, ""},
		{"sync not visible", func(f *natsFacts, _ *NATSOptions) { f.Sync = nil }, "nats.sync", Info, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, o := goodNATS(), opts
			tc.change(&f, &o)
			fs := natsFindings(f, o)
			got := find(fs, tc.check)
			if len(got) != 1 || got[0].Severity != tc.sev || !strings.Contains(got[0].Fix, tc.inFix) {
				t.Errorf("want one %s %s with fix containing %q, got %+v", tc.sev, tc.check, tc.inFix, got)
			}
		})
	}
	if n := severities(natsFindings(goodNATS(), opts)); n[Error]+n[Warn] != 0 {
		t.Errorf("good NATS setup: %+v", natsFindings(goodNATS(), opts))
	}
}

func TestSlotProblems(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	active := replication.SlotInfo{Exists: true, Active: true, WALStatus: "reserved", LagBytes: 1000}
	inactive := active
	inactive.Active = false
	cases := []struct {
		name   string
		l      SlotLimits
		s      replication.SlotInfo
		h      replication.SlotHealth
		wantIn string // "" for no problem
	}{
		{"healthy", SlotLimits{MaxLagBytes: 5000, MaxLagAge: time.Second, FailInactive: true}, active, replication.SlotHealth{FlushLag: time.Millisecond, HasFlushLag: true}, ""},
		{"missing", SlotLimits{}, replication.SlotInfo{}, replication.SlotHealth{}, "does not exist"},
		{"lost", SlotLimits{}, replication.SlotInfo{Exists: true, WALStatus: "lost"}, replication.SlotHealth{}, "invalidated"},
		{"invalidated", SlotLimits{}, active, replication.SlotHealth{Invalidated: "wal_removed"}, "wal_removed"},
		{"unreserved", SlotLimits{}, replication.SlotInfo{Exists: true, WALStatus: "unreserved"}, replication.SlotHealth{}, "about to be invalidated"},
		{"lag bytes", SlotLimits{MaxLagBytes: 999}, active, replication.SlotHealth{}, "--max-lag-bytes 999"},
		{"lag age", SlotLimits{MaxLagAge: time.Second}, active, replication.SlotHealth{FlushLag: 2 * time.Second, HasFlushLag: true}, "--max-lag-age 1s"},
		{"inactive not asked", SlotLimits{}, inactive, replication.SlotHealth{}, ""},
		{"inactive", SlotLimits{FailInactive: true}, inactive, replication.SlotHealth{}, "is inactive"},
		{"inactive within grace", SlotLimits{FailInactive: true, MaxInactive: time.Minute}, inactive, replication.SlotHealth{InactiveSince: now.Add(-30 * time.Second)}, ""},
		{"inactive past grace", SlotLimits{FailInactive: true, MaxInactive: time.Minute}, inactive, replication.SlotHealth{InactiveSince: now.Add(-2 * time.Minute)}, "inactive for 2m0s"},
		{"inactive since unknown", SlotLimits{FailInactive: true, MaxInactive: time.Minute}, inactive, replication.SlotHealth{}, "does not say since when"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(tc.l.SlotProblems("s", tc.s, tc.h, now), "\n")
			if (tc.wantIn == "") != (got == "") || !strings.Contains(got, tc.wantIn) {
				t.Errorf("problems = %q, want one containing %q", got, tc.wantIn)
			}
		})
	}
}
