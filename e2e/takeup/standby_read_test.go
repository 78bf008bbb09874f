package takeup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest/doctortest"
)

// Reading from a standby (docs/standby.md): Postgres 16+, run with
//
//	OUTBOX_TEST_PG_BINDIR=$(scripts/install-postgres.sh 17) go test -run '^TestStandbyRead$' ./e2e/takeup

// standbyReadMajor is the first Postgres major that decodes on a standby.
const standbyReadMajor = 16

// slowSlotCreate bounds how long creating the slot on the standby may
// take: without the relay asking the primary for a running-transactions
// record, the creation waits for the one Postgres writes every 15 s or so
// (11.6 s measured once with the call removed, docs/standby.md); with
// it, well under a second.
const slowSlotCreate = 10 * time.Second

// TestStandbyRead: the relay reads its slot on a hot standby (--pg-url)
// and keeps its record on the primary (--primary-url) while writers
// insert on the primary. Rows present before its first start are
// published from the slot's snapshot on the standby. It is SIGKILLed with
// publishes in flight and started again: nothing committed is missing,
// nothing is stored twice (1 s dedup window), commit order holds, and the
// slot is on the standby, none on the primary. Before that, --primary-url
// naming the standby, or another database, is refused.
func TestStandbyRead(t *testing.T) {
	pair := relaytest.StartPair(t, relaytest.PairOptions{})
	if v := pair.Primary.MajorVersion(); v < standbyReadMajor {
		relaytest.Skip(t, "needs Postgres %d or later (the test cluster runs %d): run with %s=$(scripts/install-postgres.sh 17), as the CI's Postgres 17 step does",
			standbyReadMajor, v, devenv.BinDirEnv)
	}
	env := relaytest.NewEnv(t, pair)
	ctx := context.Background()
	standby := openPool(t, pair.Standby.URL(env.Database))
	primary := pair.Primary.URL(env.Database)
	env.RelayPG = pair.Standby.URL(env.Database)
	env.SlotPool = standby
	before := env.Backlog(2000)
	pair.WaitReplayed()

	wrong := suite.StartRelay(t, env, "--primary-url", env.RelayPG)
	if code := wrong.Wait(relaytest.FaultWait); code == 0 {
		t.Fatalf("the relay with --primary-url naming the standby exited 0; log:\n%s", wrong.Logs())
	}
	relaytest.RequireLog(t, wrong, "--primary-url names", 1)
	otherDB := suite.StartRelay(t, env, "--primary-url", pair.Primary.URL("postgres"))
	if code := otherDB.Wait(relaytest.FaultWait); code == 0 {
		t.Fatalf("the relay with --primary-url naming another database exited 0; log:\n%s", otherDB.Logs())
	}
	relaytest.RequireLog(t, otherDB, "name the same database in both", 1)

	args := []string{"--primary-url", primary, "--status-interval", "1s"}
	stored := interruptTakeUp(t, env, standby, args)
	relay := suite.StartRelay(t, env, args...)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, relay, "reading from a standby", 1)
	relaytest.RequireLog(t, relay, "a previous start did not finish publishing the rows present at the slot's creation", 1)
	created, ok := relaytest.LogNumber(relay, "created the replication slot; published the rows the stream needed from the table", "create_ms")
	if !ok {
		t.Fatalf("no slot creation logged; log:\n%s", relay.Logs())
	}
	// The rows present at the start were read in the snapshot the slot
	// exported on the standby (CREATE_REPLICATION_SLOT ... SNAPSHOT
	// 'export' works during recovery).
	if n, _ := relaytest.LogNumber(relay, "created the replication slot; published the rows the stream needed from the table", "published"); int(n) != len(before)-int(stored) {
		t.Errorf("the relay published %v rows from the standby's snapshot, want the %d present before its start less the %d stored by the interrupted one", n, len(before), stored)
	}
	took := time.Duration(created) * time.Millisecond
	nudges, _ := relaytest.LogNumber(relay, "created the replication slot; published the rows the stream needed from the table", "nudges")
	t.Logf("slot created on the standby in %s after %v pg_log_standby_snapshot() calls; %d rows present before the start", took, nudges, len(before))
	// The first call comes after 200 ms; a creation that took longer
	// than a second without one got its record from the background
	// writer (the nudge is broken, and the bound below holds by luck).
	if took > slowSlotCreate || (nudges < 1 && took > time.Second) {
		t.Errorf("creating the slot on the standby took %s with %v pg_log_standby_snapshot() calls: the relay did not get a running-transactions record from the primary", took, nudges)
	}
	if n := relay.CountLog("asking for one failed"); n > 0 {
		t.Errorf("the relay logged %d failures to call pg_log_standby_snapshot() on the primary", n)
	}

	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 20, relaytest.FaultWait)
	relaytest.InFlight(t, env, relay, 1000)
	relay.Kill()
	// Started again with the primary's connection string in a file (a
	// mounted secret); both at once are refused.
	file := filepath.Join(t.TempDir(), "primary-url")
	if err := os.WriteFile(file, []byte(primary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := suite.Relay.RunCLI(t, "run", "--primary-url-file", file, "--primary-url", primary); err == nil || !strings.Contains(out, "both set") {
		t.Errorf("--primary-url with --primary-url-file (%v):\n%s", err, out)
	}
	again := suite.StartRelay(t, env, "--primary-url-file", file, "--status-interval", "1s")
	again.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	again.WaitLog(relaytest.LogSkipStored, relaytest.FaultWait)
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	res := relaytest.Settle(t, env, again, w, relaytest.Expect{MinTx: 40})
	if len(res.Missing) > 0 || len(res.Duplicates) > 0 {
		t.Errorf("reading from the standby: %d missing, %d duplicated", len(res.Missing), len(res.Duplicates))
	}

	// The standby's slot is not beyond the confirm limit recorded on the
	// primary (plus the slack the relay confirms within).
	var limit pglogrepl.LSN
	if err := env.Pool.QueryRow(ctx, `SELECT confirm_limit::text FROM public.outbox_relay_slots WHERE slot_name = $1`, env.Slot).Scan(&limit); err != nil {
		t.Fatalf("read the relay's record on the primary: %v", err)
	}
	if confirmed := env.SlotInfo().ConfirmedFlush; confirmed > limit+checkpoint.Slack {
		t.Errorf("the standby's slot confirmed %s, beyond the limit %s recorded on the primary (+%d)", confirmed, limit, checkpoint.Slack)
	} else {
		t.Logf("the standby's slot confirmed %s; the primary's record allows %s (+%d)", confirmed, limit, checkpoint.Slack)
	}
	if n := logicalSlots(t, ctx, standby, env.Slot); n != 1 {
		t.Errorf("the standby holds %d logical slots named %s, want 1", n, env.Slot)
	}
	if n := logicalSlots(t, ctx, env.Pool, ""); n != 0 {
		t.Errorf("the primary holds %d logical slots, want none", n)
	}
	if out, err := suite.Relay.RunCLI(t, "cleanup", "--retention", "0s", "--pg-url", env.PGURL, "--slot", env.Slot, "--table", env.Table.String(), "--log-format", "json"); err == nil || !strings.Contains(out, "cleanup does not support a slot on a standby") {
		t.Errorf("cleanup with the slot on the standby (%v):\n%s", err, out)
	}
	pausedReplay(t, env, standby, args)
	standbyChecks(t, env, standby, primary)
}

// pausedReplay: replay paused on the standby across a SIGKILL of the
// relay and its restart, then resumed, with writers on the primary
// throughout: the restart warns that replay is paused, nothing is missing
// or duplicated, and the standby's slot is never confirmed beyond the
// limit recorded on the primary (sampled as the relay's start reads
// them: the slot first, then the record).
func pausedReplay(t *testing.T, env *relaytest.Env, standby *pgxpool.Pool, args []string) {
	t.Helper()
	ctx := context.Background()
	stopSampling := sampleLimit(t, env, standby)
	relay := suite.StartRelay(t, env, args...)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 20, relaytest.FaultWait)
	relaytest.InFlight(t, env, relay, 500)
	if _, err := standby.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "replay paused on the standby", func() bool {
		var state string
		return standby.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&state) == nil && state == "paused"
	})
	relay.Kill()
	again := suite.StartRelay(t, env, args...)
	again.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, again, "replay is paused on the standby", 1)
	w.WaitTx(t, 20, relaytest.FaultWait)
	if _, err := standby.Exec(ctx, `SELECT pg_wal_replay_resume()`); err != nil {
		t.Fatal(err)
	}
	stop()
	res := relaytest.Settle(t, env, again, w, relaytest.Expect{MinTx: 40})
	if len(res.Missing) > 0 || len(res.Duplicates) > 0 {
		t.Errorf("replay paused across a restart: %d missing, %d duplicated", len(res.Missing), len(res.Duplicates))
	}
	samples, over := stopSampling()
	if samples == 0 {
		t.Errorf("no sample of the standby's slot against the primary's confirm limit")
	}
	for _, o := range over {
		t.Errorf("the standby's slot was beyond the confirm limit: %s", o)
	}
	t.Logf("%d samples of the standby's slot against the primary's confirm limit", samples)
}

// sampleLimit reads, until the returned function is called, the standby
// slot's confirmed position and then the confirm limit on the primary,
// and notes each sample where the former is beyond the latter (+Slack).
func sampleLimit(t *testing.T, env *relaytest.Env, standby *pgxpool.Pool) func() (int, []string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var (
		samples int
		over    []string
	)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var confirmed, limit pglogrepl.LSN
			err := standby.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, env.Slot).Scan(&confirmed)
			if err == nil {
				err = env.Pool.QueryRow(ctx, `SELECT confirm_limit::text FROM public.outbox_relay_slots WHERE slot_name = $1`, env.Slot).Scan(&limit)
			}
			if err == nil {
				samples++
				if confirmed > limit+checkpoint.Slack {
					over = append(over, fmt.Sprintf("confirmed %s, limit %s (+%d)", confirmed, limit, checkpoint.Slack))
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() (int, []string) {
		cancel()
		<-done
		return samples, over
	}
}

// standbyChecks: doctor says whether the relay can read from the standby,
// and a standby without hot_standby_feedback is refused, by doctor and at
// start, saying how to fix it.
func standbyChecks(t *testing.T, env *relaytest.Env, standby *pgxpool.Pool, primary string) {
	t.Helper()
	const check = "postgres.standby"
	rep, _, out := doctortest.Run(t, suite.Relay, env, "--pg-url", env.RelayPG, "--primary-url", primary)
	if len(doctortest.FindingOf(rep, check, doctor.OK)) != 1 {
		t.Errorf("doctor with --primary-url does not find the standby fit to read from:\n%s", out)
	}
	rep, _, out = doctortest.Run(t, suite.Relay, env, "--pg-url", env.RelayPG)
	if f := doctortest.FindingOf(rep, check, doctor.Error); len(f) != 1 || !strings.Contains(f[0].Fix, "--primary-url") {
		t.Errorf("doctor on the standby without --primary-url does not say to add it:\n%s", out)
	}

	if out, err := suite.Relay.RunCLI(t, append(append([]string{"status"}, env.ToolArgs()...), "--pg-url", env.RelayPG)...); err != nil || !strings.Contains(out, env.Slot) {
		t.Errorf("status against the standby (%v):\n%s", err, out)
	}
	if out, err := suite.Relay.RunCLI(t, append(append([]string{"run", "--source", "poll"}, env.ToolArgs()...), "--primary-url", primary)...); err == nil || !strings.Contains(out, "--primary-url is for --source wal") {
		t.Errorf("run --source poll --primary-url (%v):\n%s", err, out)
	}

	setFeedback(t, standby, "off")
	rep, _, out = doctortest.Run(t, suite.Relay, env, "--pg-url", env.RelayPG, "--primary-url", primary)
	if f := doctortest.FindingOf(rep, check, doctor.Error); len(f) != 1 || !strings.Contains(f[0].Message, "hot_standby_feedback") {
		t.Errorf("doctor does not report the standby's hot_standby_feedback off:\n%s", out)
	}
	relay := suite.StartRelay(t, env, "--primary-url", primary)
	if code := relay.Wait(relaytest.FaultWait); code == 0 {
		t.Fatalf("the relay reading from a standby without hot_standby_feedback exited 0; log:\n%s", relay.Logs())
	}
	relaytest.RequireLog(t, relay, "SET hot_standby_feedback = on", 1)
	invalidated(t, env, standby, primary)
}

// invalidated: with hot_standby_feedback off, the primary's vacuum removes
// catalog rows the standby's slot needs and Postgres invalidates the slot
// (a conflict with recovery); with feedback back on, the relay's start
// refuses the slot as a gap, giving Postgres' reason and the standby's
// fix.
func invalidated(t *testing.T, env *relaytest.Env, standby *pgxpool.Pool, primary string) {
	t.Helper()
	ctx := context.Background()
	waitUntil(t, "the standby's slot invalidated by the primary's vacuum", func() bool {
		for _, sql := range []string{`CREATE TABLE conflict_test (x int)`, `DROP TABLE conflict_test`, `VACUUM pg_class`} {
			if _, err := env.Pool.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
		var lost bool
		err := standby.QueryRow(ctx, `SELECT wal_status = 'lost' FROM pg_replication_slots WHERE slot_name = $1`, env.Slot).Scan(&lost)
		return err == nil && lost
	})
	setFeedback(t, standby, "on")
	relay := suite.StartRelay(t, env, "--primary-url", primary)
	if code := relay.Wait(relaytest.FaultWait); code == 0 {
		t.Fatalf("the relay with an invalidated slot on the standby exited 0; log:\n%s", relay.Logs())
	}
	for _, want := range []string{"on the standby was invalidated (", "primary_slot_name", "--recreate-slot"} {
		relaytest.RequireLog(t, relay, want, 1)
	}
}

// interruptTakeUp starts a relay reading from the standby and kills it
// during its take-up: its slot created on the standby and recorded on the
// primary, the rows present then not all published (NATS stopped). It
// returns how many messages the stream holds then. The next start redoes
// the take-up: drops the standby's slot, creates a new one, publishes what
// the stream lacks.
func interruptTakeUp(t *testing.T, env *relaytest.Env, standby *pgxpool.Pool, args []string) uint64 {
	t.Helper()
	ctx := context.Background()
	first := suite.StartRelay(t, env, args...)
	record := func(cond string) bool {
		var ok bool
		err := env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public.outbox_relay_slots WHERE slot_name = $1 AND `+cond+`)`, env.Slot).Scan(&ok)
		return err == nil && ok
	}
	waitUntil(t, "the take-up recorded on the primary", func() bool { return record("true") })
	env.NATS.Stop()
	waitUntil(t, "the slot's creation recorded on the primary", func() bool { return record("created_lsn <> '0/0' AND bootstrapped_at IS NULL") })
	if n := logicalSlots(t, ctx, standby, env.Slot); n != 1 {
		t.Fatalf("the standby holds %d logical slots named %s during the take-up, want 1", n, env.Slot)
	}
	first.Kill()
	if err := env.NATS.Start(); err != nil {
		t.Fatal(err)
	}
	stored := env.CountStored()
	t.Logf("take-up interrupted: slot created on the standby, %d messages stored", stored)
	return stored
}

// waitUntil polls cond until it holds, for up to relaytest.FaultWait.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(relaytest.FaultWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", relaytest.FaultWait, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logicalSlots counts the server's logical slots (named name, when set).
func logicalSlots(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical' AND ($1 = '' OR slot_name = $1)`, name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// openPool opens a pool on url, closed at the end of the test.
func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// setFeedback sets hot_standby_feedback on the standby and waits until it
// holds.
func setFeedback(t *testing.T, standby *pgxpool.Pool, value string) {
	t.Helper()
	ctx := context.Background()
	if _, err := standby.Exec(ctx, `ALTER SYSTEM SET hot_standby_feedback = `+value); err != nil {
		t.Fatal(err)
	}
	if _, err := standby.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "hot_standby_feedback = "+value+" after the reload", func() bool {
		var got string
		return standby.QueryRow(ctx, `SELECT current_setting('hot_standby_feedback')`).Scan(&got) == nil && got == value
	})
}
