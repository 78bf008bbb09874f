package takeup

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest/doctortest"
)

// standbyReadRefusals (TestStandbyRelayRefused, Postgres 16+): what run
// and doctor refuse, or warn of, reading from a standby.
//   - --pg-url naming the primary too: refused (drop --primary-url);
//   - --pg-url naming two servers: refused (exactly one standby);
//   - a logical slot of --slot's name on the primary: refused;
//   - on 17+, a standby slot that is a failover copy (synced): refused;
//   - doctor: a malformed --primary-url reported as such, an unreachable
//     one exits 2, --primary-url with --source poll exits 2;
//   - a role that may not call pg_log_standby_snapshot() on the primary is
//     warned of with the GRANT, which migrate --relay-role gives;
//   - recovery_min_apply_delay on the standby: doctor warns;
//   - creating the slot with replay paused: warned of at start, progress
//     logged while it waits, done once replay resumes.
//
// None of them leaves a slot on the standby.
func standbyReadRefusals(t *testing.T, pair *relaytest.Pair, env *relaytest.Env) {
	t.Helper()
	ctx := context.Background()
	standbyURL := pair.Standby.URL(env.Database)
	primaryURL := pair.Primary.URL(env.Database)
	standby := openPool(t, standbyURL)
	refused := func(what, want string, args ...string) {
		t.Helper()
		r := suite.StartRelay(t, env, args...)
		if code := r.Wait(relaytest.FaultWait); code == 0 {
			t.Fatalf("the relay with %s exited 0; log:\n%s", what, r.Logs())
		}
		if !strings.Contains(r.Logs(), want) {
			t.Errorf("the relay's refusal of %s does not say %q; log:\n%s", what, want, r.Logs())
		}
	}

	env.RelayPG = primaryURL
	refused("--pg-url naming the primary", "--pg-url is a primary: drop --primary-url", "--primary-url", primaryURL)
	env.RelayPG = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable", pair.Standby.Port, pair.Primary.Port, env.Database)
	refused("two hosts in --pg-url", "--pg-url must name exactly one standby", "--primary-url", primaryURL)
	env.RelayPG = standbyURL

	if _, err := env.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, env.Slot); err != nil {
		t.Fatal(err)
	}
	refused("a slot of its name on the primary", "uses slot "+env.Slot+" on the primary", "--primary-url", primaryURL)
	rep, _, out := doctortest.Run(t, suite.Relay, env, "--pg-url", standbyURL, "--primary-url", primaryURL)
	if f := doctortest.FindingOf(rep, "postgres.standby", doctor.Error); len(f) != 1 || !strings.Contains(f[0].Fix, "pg_drop_replication_slot") {
		t.Errorf("doctor does not report the slot of the same name on the primary:\n%s", out)
	}
	if _, err := env.Pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, env.Slot); err != nil {
		t.Fatal(err)
	}

	doctorMessages(t, env, standbyURL, primaryURL)
	nudgeGrant(t, env, pair, standbyURL, primaryURL)

	pausedCreation(t, env, standby, primaryURL)
	applyDelay(t, env, standby, standbyURL, primaryURL)

	if pair.Primary.MajorVersion() >= relaytest.FailoverMajor {
		syncedSlot(t, env, pair, standby)
		refused("a synced slot of its name on the standby", "synced = true", "--primary-url", primaryURL)
	}
	if n := logicalSlots(t, ctx, standby, ""); n > 1 {
		t.Errorf("the standby holds %d logical slots after the refusals, want at most the synced copy", n)
	}
}

// doctorMessages: doctor's --primary-url errors name --primary-url and
// exit with the documented codes.
func doctorMessages(t *testing.T, env *relaytest.Env, standbyURL, primaryURL string) {
	t.Helper()
	rep, code, out := doctortest.Run(t, suite.Relay, env, "--pg-url", standbyURL, "--primary-url", "postgres://relay@host:notaport/app")
	if f := doctortest.FindingOf(rep, "postgres.standby", doctor.Error); len(f) != 1 || !strings.Contains(f[0].Message, "parse --primary-url") || code != 1 {
		t.Errorf("doctor with a malformed --primary-url (exit %d) does not say parse --primary-url:\n%s", code, out)
	}
	rep, code, out = doctortest.Run(t, suite.Relay, env, "--pg-url", standbyURL, "--primary-url", "postgres://postgres@127.0.0.1:1/"+env.Database+"?connect_timeout=2")
	if f := doctortest.FindingOf(rep, "postgres.standby", doctor.Error); len(f) != 1 || !strings.Contains(f[0].Message, "--primary-url") || code != 2 {
		t.Errorf("doctor with an unreachable --primary-url exited %d (want 2, a server that cannot be reached):\n%s", code, out)
	}
	stdout, stderr, code := suite.Relay.RunSplit(t, append(append([]string{"doctor", "--json", "--source", "poll"}, env.ToolArgs()...), "--primary-url", primaryURL)...)
	if code != 2 || !strings.Contains(stdout+stderr, "--primary-url is for --source wal") {
		t.Errorf("doctor --source poll --primary-url exited %d (want 2, refused as run refuses it):\n%s%s", code, stdout, stderr)
	}
}

// nudgeGrant: migrate --relay-role grants EXECUTE on
// pg_log_standby_snapshot(); without it doctor warns, naming the GRANT.
func nudgeGrant(t *testing.T, env *relaytest.Env, pair *relaytest.Pair, standbyURL, primaryURL string) {
	t.Helper()
	ctx := context.Background()
	const role = "relay_standby"
	if out, err := suite.Relay.RunCLI(t, "migrate", "--pg-url", primaryURL, "--table", env.Table.String(), "--relay-role", role, "--log-format", "json"); err != nil {
		t.Fatalf("migrate --relay-role: %v\n%s", err, out)
	}
	var may bool
	if err := env.Pool.QueryRow(ctx, `SELECT has_function_privilege($1, 'pg_catalog.pg_log_standby_snapshot()', 'EXECUTE')`, role).Scan(&may); err != nil || !may {
		t.Errorf("migrate --relay-role did not grant EXECUTE on pg_log_standby_snapshot() (%v)", err)
	}
	if _, err := env.Pool.Exec(ctx, `REVOKE EXECUTE ON FUNCTION pg_catalog.pg_log_standby_snapshot() FROM `+role); err != nil {
		t.Fatal(err)
	}
	pair.WaitReplayed()
	asRole := func(url string) string {
		return strings.Replace(url, "postgres://postgres@", "postgres://"+role+"@", 1)
	}
	rep, _, out := doctortest.Run(t, suite.Relay, env, "--pg-url", asRole(standbyURL), "--primary-url", asRole(primaryURL))
	warned := false
	for _, f := range doctortest.FindingOf(rep, "postgres.standby", doctor.Warn) {
		warned = warned || strings.Contains(f.Message, `GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO "`+role+`"`)
	}
	if !warned {
		t.Errorf("doctor as a role that may not call pg_log_standby_snapshot() does not warn with the GRANT:\n%s", out)
	}

	// A role that may not read pg_control_system(): the same-cluster
	// check is skipped, with a warning.
	for _, sql := range []string{`REVOKE EXECUTE ON FUNCTION pg_catalog.pg_control_system() FROM PUBLIC`, `GRANT EXECUTE ON FUNCTION pg_catalog.pg_log_standby_snapshot() TO ` + role} {
		if _, err := env.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	pair.WaitReplayed()
	rep, _, out = doctortest.Run(t, suite.Relay, env, "--pg-url", asRole(standbyURL), "--primary-url", asRole(primaryURL))
	f := doctortest.FindingOf(rep, "postgres.standby", doctor.Warn)
	if len(f) != 1 || !strings.Contains(f[0].Message, "could not check that --pg-url and --primary-url are one cluster") {
		t.Errorf("doctor as a role that may not call pg_control_system() does not warn that the same-cluster check was skipped:\n%s", out)
	}
	if _, err := env.Pool.Exec(ctx, `GRANT EXECUTE ON FUNCTION pg_catalog.pg_control_system() TO PUBLIC`); err != nil {
		t.Fatal(err)
	}
}

// syncedSlot leaves on the standby a synced copy of a failover slot of
// env.Slot's name, and none on the primary: a failover slot created on
// the primary, synced (pg_sync_replication_slots), then dropped there.
func syncedSlot(t *testing.T, env *relaytest.Env, pair *relaytest.Pair, standby *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`, env.Slot); err != nil {
		t.Fatal(err)
	}
	// The sync keeps the copy only once the primary's slot is at or past
	// the position the copy reserves on the standby: move the primary's
	// slot on (nobody streams from it) and ask again until the copy is
	// there, persistent.
	waitUntil(t, "a synced copy of the primary's failover slot on the standby", func() bool {
		if _, err := env.Pool.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Pool.Exec(ctx, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, env.Slot); err != nil {
			t.Fatal(err)
		}
		pair.WaitReplayed()
		if _, err := standby.Exec(ctx, `SELECT pg_sync_replication_slots()`); err != nil {
			t.Logf("pg_sync_replication_slots(): %v", err)
		}
		var synced bool
		err := standby.QueryRow(ctx, `SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = $1`, env.Slot).Scan(&synced)
		return err == nil && synced
	})
	if _, err := env.Pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, env.Slot); err != nil {
		t.Fatal(err)
	}
}

// pausedCreation: a relay started with replay paused on the standby warns
// of it, and its slot's creation, which cannot end before replay resumes,
// logs that it waits and why; once replay resumes it streams.
func pausedCreation(t *testing.T, env *relaytest.Env, standby *pgxpool.Pool, primaryURL string) {
	t.Helper()
	ctx := context.Background()
	if _, err := standby.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "replay paused on the standby", func() bool {
		var state string
		return standby.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&state) == nil && state == "paused"
	})
	relay := suite.StartRelay(t, env, "--primary-url", primaryURL)
	const waiting = "creating the slot on the standby: still waiting for the standby to replay"
	relay.WaitLog(waiting, relaytest.FaultWait)
	relaytest.RequireLog(t, relay, "replay is paused on the standby", 1)
	if !strings.Contains(relay.Logs(), `"replay_pause_state":"paused"`) {
		t.Errorf("the relay's wait for the slot's creation does not say replay is paused; log:\n%s", relay.Logs())
	}
	if _, err := standby.Exec(ctx, `SELECT pg_wal_replay_resume()`); err != nil {
		t.Fatal(err)
	}
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relay.Drain(30 * time.Second)
	if _, err := standby.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, env.Slot); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `DELETE FROM public.outbox_relay_slots WHERE slot_name = $1`, env.Slot); err != nil {
		t.Fatal(err)
	}
}

// applyDelay: doctor warns of a standby that delays replay
// (recovery_min_apply_delay), which the relay would see late.
func applyDelay(t *testing.T, env *relaytest.Env, standby *pgxpool.Pool, standbyURL, primaryURL string) {
	t.Helper()
	ctx := context.Background()
	set := func(v string) {
		t.Helper()
		for _, sql := range []string{`ALTER SYSTEM SET recovery_min_apply_delay = '` + v + `'`, `SELECT pg_reload_conf()`} {
			if _, err := standby.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, "recovery_min_apply_delay = "+v, func() bool {
			var got string
			return standby.QueryRow(ctx, `SELECT current_setting('recovery_min_apply_delay')`).Scan(&got) == nil && got == v
		})
	}
	set("5min")
	rep, _, out := doctortest.Run(t, suite.Relay, env, "--pg-url", standbyURL, "--primary-url", primaryURL)
	warned := false
	for _, f := range doctortest.FindingOf(rep, "postgres.standby", doctor.Warn) {
		warned = warned || strings.Contains(f.Message, "recovery_min_apply_delay = 5m0s")
	}
	if !warned {
		t.Errorf("doctor does not warn of the standby's recovery_min_apply_delay:\n%s", out)
	}
	set("0")
}
