package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest/doctortest"
)

// pollChecks are the findings doctor --source poll adds.
var pollChecks = []string{"postgres.table", "postgres.poll_seq", "postgres.poll_index", "postgres.poll_claims", "postgres.poll_notify",
	"postgres.privileges", "postgres.poll_advisory_locks", "postgres.poll_wal_slot", "postgres.poll_idle_timeout",
	"nats.poll_duplicate_window"}

// walChecks are the WAL relay's findings, which polling does not need.
var walChecks = []string{"postgres.wal_level", "postgres.role", "postgres.publication", "postgres.replication_slots", "postgres.wal_senders",
	"postgres.max_slot_wal_keep_size", "postgres.wal_sender_timeout", "postgres.slot"}

// pollRole creates, with migrate --source poll --relay-role, a role with
// exactly the polling relay's grants and returns the test database's URL
// as that role.
func pollRole(t *testing.T, env *relaytest.Env, name string) string {
	t.Helper()
	role := name + "_" + env.Database
	t.Cleanup(func() {
		_, _ = env.Pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = env.Pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	if out, err := suite.Relay.RunCLI(t, "migrate", "--pg-url", env.PGURL, "--source", "poll", "--relay-role", role); err != nil {
		t.Fatalf("migrate --source poll --relay-role (%v):\n%s", err, out)
	}
	url := strings.Replace(env.PGURL, "postgres://postgres@", "postgres://"+role+"@", 1)
	if url == env.PGURL {
		t.Fatalf("cannot put the role in %s", env.PGURL)
	}
	return url
}

// requireSilent fails unless every check is ok or info.
func requireSilent(t *testing.T, rep doctor.Report, checks []string, out string) {
	t.Helper()
	for _, c := range checks {
		if len(doctortest.FindingOf(rep, c, doctor.OK))+len(doctortest.FindingOf(rep, c, doctor.Info)) == 0 || len(doctortest.FindingOf(rep, c, doctor.Warn))+len(doctortest.FindingOf(rep, c, doctor.Error)) > 0 {
			t.Errorf("%s is not ok on a good polling setup:\n%s", c, out)
		}
	}
}

// TestDoctorPollGoodSetup: a table set up by migrate --source poll
// --notify passes doctor --source poll --notify (exit 0, no warning),
// as a superuser and as the role migrate made, before the first start and
// with the polling relay running; the WAL relay's checks are not made.
func TestDoctorPollGoodSetup(t *testing.T) {
	t.Parallel()
	env := suite.PollEnv(t, suite.NewEnv(t))
	if out, err := suite.Relay.RunCLI(t, "migrate", "--pg-url", env.PGURL, "--notify"); err != nil {
		t.Fatalf("migrate --notify (%v):\n%s", err, out)
	}
	env.Tx(relaytest.NewRow("order", "1", "created", `{"n": 1}`))
	poll := []string{"--source", "poll", "--notify"}
	rep, code, out := doctortest.Run(t, suite.Relay, env, poll...)
	if code != 0 || rep.Errors+rep.Warnings != 0 {
		t.Fatalf("doctor --source poll on a good setup: exit %d, %d errors, %d warnings:\n%s", code, rep.Errors, rep.Warnings, out)
	}
	requireSilent(t, rep, pollChecks, out)
	for _, c := range walChecks {
		if fs := append(doctortest.FindingOf(rep, c, doctor.OK), append(doctortest.FindingOf(rep, c, doctor.Warn), doctortest.FindingOf(rep, c, doctor.Error)...)...); len(fs) > 0 {
			t.Errorf("doctor --source poll made the WAL relay's check %s:\n%s", c, out)
		}
	}

	url := pollRole(t, env, "doctorpoll")
	rep, code, out = doctortest.Run(t, suite.Relay, env, append(poll, "--pg-url", url)...)
	if code != 0 || rep.Errors+rep.Warnings != 0 {
		t.Fatalf("doctor --source poll as the role migrate made: exit %d:\n%s", code, out)
	}
	requireSilent(t, rep, pollChecks, out)

	// Running: the stream exists with the tests' 1 s window, which covers
	// the relay's poll interval and ack timeout.
	timing := []string{"--poll-interval", "100ms", "--ack-timeout", "500ms"}
	relay := suite.StartRelay(t, env, append([]string{"--source", "poll"}, timing...)...)
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
	env.WaitStored(1, 30*time.Second)
	rep, code, out = doctortest.Run(t, suite.Relay, env, append(append(poll, timing...), "--max-outage", env.DuplicateWindow.String())...)
	if code != 0 || rep.Errors+rep.Warnings != 0 || len(doctortest.FindingOf(rep, "nats.stream_storage", doctor.OK)) != 1 {
		t.Errorf("doctor --source poll with the relay running: exit %d:\n%s", code, out)
	}
	requireSilent(t, rep, pollChecks, out)
	relay.Drain(30 * time.Second)
	text, _, _ := suite.Relay.RunSplit(t, append(append(append([]string{"doctor"}, env.ToolArgs()...), poll...), append(timing, "--max-outage", "1s")...)...)
	t.Logf("doctor --source poll:\n%s", text)
}

// TestDoctorPollFindsBrokenSetups: each way a polling setup can be broken
// is reported by its check with its fix (exit 1 for errors, 0 with a
// warning), on a table first set up right.
func TestDoctorPollFindsBrokenSetups(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(t *testing.T, env *relaytest.Env) []string // extra flags
		check string
		sev   doctor.Severity
		want  []string // in the message or the fix
	}{
		{"seq without default", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`ALTER TABLE outbox_events ALTER COLUMN seq DROP DEFAULT`)
			return nil
		}, "postgres.poll_seq", doctor.Error, []string{"seq has no default", "outbox-relay migrate --source poll"}},
		{"pending index missing", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`DROP INDEX idx_outbox_pending_aggregate`)
			return nil
		}, "postgres.poll_index", doctor.Error, []string{`"public"."idx_outbox_pending_aggregate" does not exist`, "outbox-relay migrate --source poll"}},
		{"pending index invalid", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'idx_outbox_pending_aggregate'::regclass`)
			return nil
		}, "postgres.poll_index", doctor.Error, []string{"is invalid", "drops and rebuilds"}},
		{"polling columns missing", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`ALTER TABLE outbox_events DROP COLUMN retry_after`)
			return nil
		}, "postgres.table", doctor.Error, []string{"lacks the columns retry_after", "outbox-relay migrate"}},
		{"aggregate id nullable", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`ALTER TABLE outbox_events ALTER COLUMN aggregate_id DROP NOT NULL`)
			return nil
		}, "postgres.table", doctor.Error, []string{"allows NULL in aggregate_id", `ALTER TABLE "public"."outbox_events" ALTER COLUMN "aggregate_id" SET NOT NULL`}},
		{"claims table dropped", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`DROP TABLE outbox_relay_poll_claims`)
			return nil
		}, "postgres.poll_claims", doctor.Error, []string{`"public"."outbox_relay_poll_claims" does not exist`, `CREATE TABLE IF NOT EXISTS "public".outbox_relay_poll_claims (`}},
		{"NOTIFY trigger missing", func(t *testing.T, env *relaytest.Env) []string {
			return []string{"--notify"}
		}, "postgres.poll_notify", doctor.Warn, []string{"no NOTIFY trigger", "outbox-relay migrate --notify"}},
		{"NOTIFY trigger disabled", func(t *testing.T, env *relaytest.Env) []string {
			if out, err := suite.Relay.RunCLI(t, "migrate", "--pg-url", env.PGURL, "--notify"); err != nil {
				t.Fatalf("migrate --notify (%v):\n%s", err, out)
			}
			env.Exec(`ALTER TABLE outbox_events DISABLE TRIGGER outbox_events_insert_notify`)
			return []string{"--notify"}
		}, "postgres.poll_notify", doctor.Warn, []string{"is disabled", `ALTER TABLE "public"."outbox_events" ENABLE TRIGGER "outbox_events_insert_notify"`}},
		{"role cannot update the bookkeeping", func(t *testing.T, env *relaytest.Env) []string {
			url := pollRole(t, env, "doctorpoll_noupd")
			env.Exec(`REVOKE UPDATE (processed_at, attempts) ON outbox_events FROM doctorpoll_noupd_` + env.Database)
			return []string{"--pg-url", url}
		}, "postgres.privileges", doctor.Error, []string{"cannot UPDATE processed_at, attempts", "GRANT UPDATE (processed_at, attempts, retry_after, last_error) ON \"public\".\"outbox_events\""}},
		{"role cannot write claims", func(t *testing.T, env *relaytest.Env) []string {
			url := pollRole(t, env, "doctorpoll_noclaim")
			env.Exec(`REVOKE INSERT ON outbox_relay_poll_claims FROM doctorpoll_noclaim_` + env.Database)
			return []string{"--pg-url", url}
		}, "postgres.privileges", doctor.Error, []string{"lacks SELECT, INSERT, UPDATE, DELETE on \"public\".\"outbox_relay_poll_claims\"", "GRANT SELECT, INSERT, UPDATE, DELETE ON \"public\".\"outbox_relay_poll_claims\""}},
		{"role cannot take advisory locks", func(t *testing.T, env *relaytest.Env) []string {
			url := pollRole(t, env, "doctorpoll_nolock")
			env.Exec(`REVOKE EXECUTE ON FUNCTION pg_try_advisory_xact_lock(integer, integer) FROM PUBLIC`)
			return []string{"--pg-url", url}
		}, "postgres.poll_advisory_locks", doctor.Error, []string{"may not call pg_try_advisory_xact_lock", "GRANT EXECUTE ON FUNCTION pg_catalog.pg_try_advisory_xact_lock(integer, integer) TO"}},
		{"batch beyond the lock table", func(t *testing.T, env *relaytest.Env) []string {
			return []string{"--poll-batch", "100000"}
		}, "postgres.poll_advisory_locks", doctor.Error, []string{"out of shared memory", "lower --poll-batch"}},
		{"WAL relay's slot exists", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, env.Slot)
			return nil
		}, "postgres.poll_wal_slot", doctor.Error, []string{"polling would publish again", "SELECT pg_drop_replication_slot('" + "relay_"}},
		{"idle in transaction timeout", func(t *testing.T, env *relaytest.Env) []string {
			env.Exec(`ALTER DATABASE ` + env.Database + ` SET idle_in_transaction_session_timeout = '5s'`)
			return nil
		}, "postgres.poll_idle_timeout", doctor.Warn, []string{"idle_in_transaction_session_timeout = 5s", "SET idle_in_transaction_session_timeout = 0"}},
		{"duplicate window shorter than the poll timing", func(t *testing.T, env *relaytest.Env) []string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.*.*", env.DeadSubj},
				Storage: jetstream.FileStorage, Duplicates: time.Second}); err != nil {
				t.Fatal(err)
			}
			return []string{"--max-outage", "1s", "--poll-interval", "5s", "--ack-timeout", "5s"}
		}, "nats.poll_duplicate_window", doctor.Warn, []string{"duplicate window 1s is shorter than --poll-interval 5s + --ack-timeout 5s", "nats stream edit OUTBOX --dupe-window 10s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := suite.PollEnv(t, suite.NewEnv(t))
			extra := append([]string{"--source", "poll"}, tc.setup(t, env)...)
			rep, code, out := doctortest.Run(t, suite.Relay, env, extra...)
			if want := map[doctor.Severity]int{doctor.Error: 1, doctor.Warn: 0}[tc.sev]; code != want {
				t.Errorf("exit %d, want %d", code, want)
			}
			got := doctortest.FindingOf(rep, tc.check, tc.sev)
			if len(got) == 0 {
				t.Fatalf("no %s %s:\n%s", tc.sev, tc.check, out)
			}
			all, _ := json.Marshal(got)
			for _, w := range tc.want {
				if !strings.Contains(string(all), strings.ReplaceAll(w, `"`, `\"`)) {
					t.Errorf("%s lacks %q:\n%s", tc.check, w, out)
				}
			}
			// The other polling checks stay quiet: each finding fires
			// for its own fault only.
			for _, c := range pollChecks {
				if c == tc.check {
					continue
				}
				if bad := append(doctortest.FindingOf(rep, c, doctor.Warn), doctortest.FindingOf(rep, c, doctor.Error)...); len(bad) > 0 {
					t.Errorf("%s fired too: %+v", c, bad)
				}
			}
			if tc.check == "postgres.poll_claims" {
				// The fix as printed repairs the setup.
				env.Exec(got[0].Fix)
				if rep, _, out := doctortest.Run(t, suite.Relay, env, extra...); len(doctortest.FindingOf(rep, tc.check, doctor.OK)) != 1 {
					t.Errorf("after the fix %s is not ok:\n%s", tc.check, out)
				}
			}
		})
	}
}
