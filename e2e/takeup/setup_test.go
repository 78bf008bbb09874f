package takeup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestWrongSetupFailsWithTheFix: each misconfiguration stops the relay at
// start, non-zero, with a message that names the fix.
func TestWrongSetupFailsWithTheFix(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, env *relaytest.Env) []string // extra relay flags
		want  []string
	}{
		{"publication missing", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`DROP PUBLICATION outbox_pub`)
			return nil
		}, []string{`publication \"outbox_pub\" does not exist`, "CREATE PUBLICATION"}},
		{"table not in the publication", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`ALTER PUBLICATION outbox_pub DROP TABLE outbox_events`)
			return nil
		}, []string{"is not in publication", "ALTER PUBLICATION outbox_pub ADD TABLE"}},
		{"table without a required column", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`ALTER TABLE outbox_events DROP COLUMN aggregate_id CASCADE`)
			return nil
		}, []string{"has no column aggregate_id"}},
		{"table missing", func(t *testing.T, env *relaytest.Env) []string {
			return []string{"--table", "public.no_such_table"}
		}, []string{"does not exist", "outbox-relay migrate"}},
		{"role without REPLICATION", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'norepl') THEN CREATE ROLE norepl LOGIN; END IF; END $$`)
			env.Exec(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO norepl`)
			return []string{"--pg-url", strings.Replace(env.PGURL, "postgres://postgres@", "postgres://norepl@", 1)}
		}, []string{`role \"norepl\" lacks the REPLICATION attribute`, `ALTER ROLE \"norepl\" REPLICATION`}}, // the JSON log line: the error is printed once
		{"stream subjects do not cover the template", func(t *testing.T, env *relaytest.Env) []string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"orders.>"}}); err != nil {
				t.Fatal(err)
			}
			return nil
		}, []string{"do not cover", "outbox.*.*"}},
		{"bad subject template", func(t *testing.T, env *relaytest.Env) []string {
			return []string{"--subject", "{event_type}.x"}
		}, []string{"first token must be a fixed prefix"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := suite.NewEnv(t)
			extra := tc.setup(t, env)
			relay := suite.StartRelay(t, env, extra...)
			if code := relay.Wait(30 * time.Second); code == 0 {
				t.Fatalf("relay exited 0 with a broken setup")
			}
			for _, w := range tc.want {
				if !strings.Contains(relay.Logs(), w) {
					t.Errorf("log lacks %q:\n%s", w, relay.Logs())
				}
			}
		})
	}
}

// TestWALLevelNotLogical needs a cluster of its own.
func TestWALLevelNotLogical(t *testing.T) {
	cluster := relaytest.PrivateCluster(t, map[string]string{"wal_level": "replica"})
	env := relaytest.NewEnv(t, cluster)
	relay := suite.StartRelay(t, env)
	if code := relay.Wait(30 * time.Second); code == 0 {
		t.Fatal("relay exited 0 with wal_level = replica")
	}
	if !strings.Contains(relay.Logs(), "ALTER SYSTEM SET wal_level = logical") {
		t.Errorf("log does not say how to fix wal_level:\n%s", relay.Logs())
	}
}
