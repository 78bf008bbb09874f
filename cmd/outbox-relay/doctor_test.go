package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest/doctortest"
)

// TestDoctorGoodSetup: a migrated database and a NATS server pass (exit 0),
// before the first start and with the relay streaming; the text form says
// the same.
func TestDoctorGoodSetup(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	env.Tx(relaytest.NewRow("order", "1", "created", `{"n": 1}`))
	rep, code, out := doctortest.Run(t, suite.Relay, env)
	if code != 0 || rep.Errors != 0 {
		t.Fatalf("doctor on a good setup: exit %d, %d errors:\n%s", code, rep.Errors, out)
	}
	for _, c := range []string{"postgres.wal_level", "postgres.role", "postgres.publication", "postgres.table", "postgres.replication_slots",
		"postgres.wal_senders", "postgres.privileges", "nats.jetstream", "nats.duplicate_window", "nats.max_message_size"} {
		if len(doctortest.FindingOf(rep, c, doctor.OK)) == 0 {
			t.Errorf("no ok finding %s:\n%s", c, out)
		}
	}
	// max_slot_wal_keep_size always warns (unbounded: the disk can fill;
	// bounded: the slot can be invalidated), and --fail-on-warn turns
	// warnings into exit 1.
	if len(doctortest.FindingOf(rep, "postgres.max_slot_wal_keep_size", doctor.Warn)) != 1 {
		t.Errorf("no warning about max_slot_wal_keep_size:\n%s", out)
	}
	if _, code, _ := doctortest.Run(t, suite.Relay, env, "--fail-on-warn"); code != 1 {
		t.Errorf("doctor --fail-on-warn with warnings: exit %d, want 1", code)
	}

	relay := suite.StartRelay(t, env)
	relay.WaitLog("streaming from the slot", 30*time.Second)
	env.WaitStored(1, 30*time.Second)
	// The relay's stream has the tests' 1 s window: tolerate 1 s outages.
	rep, code, out = doctortest.Run(t, suite.Relay, env, "--max-outage", env.DuplicateWindow.String())
	if code != 0 || len(doctortest.FindingOf(rep, "postgres.slot", doctor.OK)) != 1 || len(doctortest.FindingOf(rep, "nats.stream_storage", doctor.OK)) != 1 {
		t.Errorf("doctor with the relay streaming: exit %d:\n%s", code, out)
	}
	text, _, code := suite.Relay.RunSplit(t, append([]string{"doctor"}, append(env.ToolArgs(), "--max-outage", "1s")...)...)
	if code != 0 || !strings.Contains(text, "0 errors") || !strings.Contains(text, "is active (pid") {
		t.Errorf("doctor text (exit %d):\n%s", code, text)
	}
	t.Logf("doctor:\n%s", text)
	relaytest.StopRelay(t, relay)
}

// TestDoctorFindsBrokenSetups: each broken setup is reported with its fix,
// exit 1.
func TestDoctorFindsBrokenSetups(t *testing.T) {
	t.Parallel()
	createStream := func(t *testing.T, env *relaytest.Env, cfg jetstream.StreamConfig) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cfg.Name, cfg.Subjects = env.Stream, []string{"outbox.*.*", env.DeadSubj}
		if _, err := env.JS.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, env *relaytest.Env) []string // extra flags
		check string
		want  []string // in the message or the fix
	}{
		{"publication missing", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`DROP PUBLICATION outbox_pub`)
			return nil
		}, "postgres.publication", []string{`publication "outbox_pub" does not exist`, "CREATE PUBLICATION outbox_pub FOR TABLE"}},
		{"publication without insert", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`ALTER PUBLICATION outbox_pub SET (publish = 'update')`)
			return nil
		}, "postgres.publication", []string{"does not publish inserts", "ALTER PUBLICATION outbox_pub SET (publish = 'insert')"}},
		{"table missing from the publication", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`ALTER PUBLICATION outbox_pub DROP TABLE outbox_events`)
			return nil
		}, "postgres.publication", []string{"is not in publication", `ALTER PUBLICATION outbox_pub ADD TABLE "public"."outbox_events"`}},
		{"role without REPLICATION", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'doctor_norepl') THEN CREATE ROLE doctor_norepl LOGIN; END IF; END $$`)
			return []string{"--pg-url", strings.Replace(env.PGURL, "postgres://postgres@", "postgres://doctor_norepl@", 1)}
		}, "postgres.role", []string{`role "doctor_norepl" lacks the REPLICATION attribute`, `ALTER ROLE "doctor_norepl" REPLICATION`}},
		{"role without SELECT", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'doctor_nosel') THEN CREATE ROLE doctor_nosel LOGIN REPLICATION; END IF; END $$`)
			return []string{"--pg-url", strings.Replace(env.PGURL, "postgres://postgres@", "postgres://doctor_nosel@", 1)}
		}, "postgres.privileges", []string{`cannot SELECT`, `GRANT SELECT ON "public"."outbox_events" TO "doctor_nosel"`}},
		{"stream with memory storage", func(t *testing.T, env *relaytest.Env) []string {
			createStream(t, env, jetstream.StreamConfig{Storage: jetstream.MemoryStorage, Duplicates: 2 * time.Minute})
			return nil
		}, "nats.stream_storage", []string{"memory storage", "nats stream rm OUTBOX"}},
		{"duplicate window shorter than the outage", func(t *testing.T, env *relaytest.Env) []string {
			createStream(t, env, jetstream.StreamConfig{Storage: jetstream.FileStorage, Duplicates: 5 * time.Second})
			return []string{"--max-outage", "10m"}
		}, "nats.duplicate_window", []string{"duplicate window 5s is shorter", "nats stream edit OUTBOX --dupe-window 10m"}},
		{"stream subjects do not cover the template", func(t *testing.T, env *relaytest.Env) []string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"orders.>", env.DeadSubj}}); err != nil {
				t.Fatal(err)
			}
			return nil
		}, "nats.stream_subjects", []string{"do not cover", "nats stream edit OUTBOX --subjects 'orders.>,outbox_dead_letter,outbox.*.*'"}},
		{"payload larger than max_payload", func(t *testing.T, env *relaytest.Env) []string {
			env.StartNATS(devenv.NATSOptions{MaxPayload: 4096})
			env.Tx(relaytest.NewRow("order", "1", "created", `{"pad": "`+strings.Repeat("x", 5000)+`"}`))
			return nil
		}, "nats.max_message_size", []string{"exceeds the server's max_payload", "max_payload: 1048576"}},
		{"JetStream disabled", func(t *testing.T, env *relaytest.Env) []string {
			return []string{"--nats-url", startBareNATS(t, func(o *natsserver.Options) { o.JetStream = false })}
		}, "nats.jetstream", []string{"JetStream is not available", "nats-server with -js"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := suite.NewEnv(t)
			extra := tc.setup(t, env)
			rep, code, out := doctortest.Run(t, suite.Relay, env, extra...)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			got := doctortest.FindingOf(rep, tc.check, doctor.Error)
			if len(got) == 0 {
				t.Fatalf("no error %s:\n%s", tc.check, out)
			}
			all, _ := json.Marshal(got)
			for _, w := range tc.want {
				if !strings.Contains(string(all), strings.ReplaceAll(strings.ReplaceAll(w, `"`, `\"`), ">", `\u003e`)) {
					t.Errorf("%s lacks %q:\n%s", tc.check, w, out)
				}
			}
		})
	}
}

// TestDoctorClusterLimits needs a cluster of its own: wal_level = replica
// and every replication slot taken.
func TestDoctorClusterLimits(t *testing.T) {
	t.Parallel()
	cluster := relaytest.PrivateCluster(t, map[string]string{"wal_level": "replica", "max_replication_slots": "1", "max_wal_senders": "1"})
	env := relaytest.NewEnv(t, cluster)
	env.Exec(`SELECT pg_create_physical_replication_slot('doctor_taken')`)
	t.Cleanup(func() { _, _ = env.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot('doctor_taken')`) })
	rep, code, out := doctortest.Run(t, suite.Relay, env)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for check, want := range map[string]string{
		"postgres.wal_level":         "ALTER SYSTEM SET wal_level = logical",
		"postgres.replication_slots": "ALTER SYSTEM SET max_replication_slots = 3",
	} {
		got := doctortest.FindingOf(rep, check, doctor.Error)
		if len(got) != 1 || !strings.Contains(got[0].Fix, want) {
			t.Errorf("%s: want an error with fix %q:\n%s", check, want, out)
		}
	}
}

// startBareNATS starts an embedded NATS server changed by edit and
// returns its URL.
func startBareNATS(t *testing.T, edit func(*natsserver.Options)) string {
	t.Helper()
	opts := devenv.NATSOptions{StoreDir: t.TempDir()}.ServerOptions()
	opts.Port = -1
	edit(opts)
	srv, err := devenv.ServeNATS(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv.ClientURL()
}

// TestDoctorTableWithoutPayload: a table the relay cannot read is one
// finding among the others, not the end of the report.
func TestDoctorTableWithoutPayload(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	env.Exec(`ALTER TABLE outbox_events DROP COLUMN payload CASCADE`)
	rep, code, out := doctortest.Run(t, suite.Relay, env)
	if code != 1 || len(doctortest.FindingOf(rep, "postgres.table", doctor.Error)) != 1 || len(doctortest.FindingOf(rep, "nats.jetstream", doctor.OK)) != 1 {
		t.Errorf("exit %d, want 1 with the table's error and the other checks:\n%s", code, out)
	}
}
