package takeup

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/verify"
)

// Failover (Postgres 17+). These tests start clusters of their own, a
// primary and a physical standby, and run only when OUTBOX_TEST_PG_BINDIR
// chooses Postgres 17 or later; elsewhere they are skipped with the
// command that runs them. The CI runs them in a step of their own:
//
//	OUTBOX_TEST_PG_BINDIR=$(scripts/install-postgres.sh 17) go test -run 'TestFailover|TestStandbyRelayRefused' ./e2e/takeup

// Log lines the failover tests require.
const (
	logTimelineChanged = "the Postgres timeline changed"
	logMadeFailover    = "made it one (ALTER_REPLICATION_SLOT"
)

// TestFailoverOldPostgres: --failover on a server older than 17 is refused
// at start, with what to do. It runs on the test cluster, whatever its
// version, and checks the refusal only below 17.
func TestFailoverOldPostgres(t *testing.T) {
	env := suite.NewEnv(t)
	var version int
	if err := env.Pool.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	relay := suite.StartRelay(t, env, "--failover")
	if version >= 170000 {
		relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
		if !slotFailover(t, env) {
			t.Fatalf("the relay created slot %s without failover on Postgres %d", env.Slot, version)
		}
		relay.Drain(30 * time.Second)
		return
	}
	if code := relay.Wait(relaytest.FaultWait); code == 0 {
		t.Fatalf("the relay with --failover on Postgres %d exited 0; log:\n%s", version, relay.Logs())
	}
	if !strings.Contains(relay.Logs(), "--failover needs Postgres 17 or later") {
		t.Errorf("the relay's refusal does not say why; log:\n%s", relay.Logs())
	}
	if env.SlotInfo().Exists {
		t.Errorf("the relay refused --failover but created slot %s", env.Slot)
	}
}

// TestFailoverPromotedStandby: the primary is SIGKILLed (postmaster and
// every backend at once) while the relay has publishes in flight under a
// concurrent load; the physical standby, which synced the relay's failover
// slot, is promoted. The relay, given both hosts with
// target_session_attrs=read-write, goes on from the promoted standby: the
// same system identifier on a new timeline, which it stamps from then on.
// Nothing committed is missing, nothing is stored twice (1 s dedup window),
// JetStream acknowledged no publish as a duplicate.
//
// The slot is first created without --failover: the relay with --failover
// makes the existing slot a failover slot.
func TestFailoverPromotedStandby(t *testing.T) {
	pair := relaytest.StartPair(t, relaytest.PairOptions{Failover: true, Guard: true})
	env := relaytest.NewEnv(t, pair)
	first := suite.StartRelay(t, env)
	first.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	first.Drain(30 * time.Second)
	if slotFailover(t, env) {
		t.Fatal("the slot is a failover slot before --failover was given")
	}

	relay := suite.StartRelay(t, env, "--failover", "--status-interval", "1s")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, relay, logMadeFailover, 1)
	if !slotFailover(t, env) {
		t.Fatalf("slot %s is not a failover slot after a start with --failover", env.Slot)
	}
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 20, relaytest.FaultWait)
	pair.WaitSlotSynced(env.Slot)
	before := w.CommittedTx()
	relaytest.InFlight(t, env, relay, 1000)

	sessions := relay.CountLog(relaytest.LogStreaming)
	killed := time.Now()
	if err := pair.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pair.Standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	relay.WaitLog(logTimelineChanged, 2*relaytest.FaultWait)
	relaytest.WaitLogCount(t, relay, relaytest.LogStreaming, sessions+1, relaytest.FaultWait)
	t.Logf("primary killed; standby promoted in %s; the relay streams from it %s after the promotion",
		promoted.Sub(killed).Round(time.Millisecond), time.Since(promoted).Round(time.Millisecond))
	// The events in flight at the kill were stored after the slot's last
	// confirmation: the promoted standby's copy replays them, and the
	// relay must skip them.
	relay.WaitLog(relaytest.LogSkipStored, relaytest.FaultWait)
	w.WaitTx(t, 20, 2*relaytest.FaultWait)
	stop()
	res := relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: before + 20})
	if len(res.Duplicates) > 0 || len(res.Missing) > 0 {
		t.Errorf("after the failover: %d missing, %d duplicated", len(res.Missing), len(res.Duplicates))
	}
	requireTimelines(t, env)
	for _, line := range strings.Split(relay.Logs(), "\n") {
		if strings.Contains(line, logTimelineChanged) || strings.Contains(line, relaytest.LogSkipStored) || strings.Contains(line, "reconnecting") || strings.Contains(line, relaytest.LogStreaming) {
			t.Log(line)
		}
	}
}

// TestFailoverAheadOfStandby: without synchronized_standby_slots, the
// relay publishes events the standby never receives (its link to the
// primary cut), then the primary dies and the standby is promoted. Those
// events are in the stream and not in the new primary, and the new
// timeline writes other transactions at their WAL positions: the relay
// must not take those for replays. It stops, saying what happened and how
// to prevent it; a relay started again publishes every event of the new
// timeline. The check: nothing missing, nothing twice, and the only extra
// messages are exactly the events the standby never received.
func TestFailoverAheadOfStandby(t *testing.T) {
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

	pair.Link.Cut()
	stored := env.CountStored()
	orphans := env.Backlog(2000)
	env.WaitStored(int(stored)+len(orphans), relaytest.FaultWait)
	if err := pair.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pair.Standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if code := relay.Wait(2 * relaytest.FaultWait); code == 0 {
		t.Fatalf("the relay exited 0 after publishing events beyond the fork; log:\n%s", relay.Logs())
	}
	relaytest.RequireLog(t, relay, "forking at", 1)
	relaytest.RequireLog(t, relay, "synchronized_standby_slots on the primary", 1)

	for i := 0; i < 20; i++ {
		txRetry(t, env, relaytest.NewRow("t", "a2", "after", fmt.Sprintf(`{"n": %d}`, i)))
	}
	again := suite.StartRelay(t, env, "--failover")
	again.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	again.Drain(30 * time.Second)

	rep, err := verify.Run(ctx, env.Pool, jssink.NewReader(env.JS, env.StreamHandle(10*time.Second), "outbox.>", env.DeadSubj, nil), verify.Options{Table: env.Table})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("check: %d rows, %d messages; missing %d, extra %d, duplicated %d", rep.Rows, rep.Messages, len(rep.Missing), len(rep.Extra), len(rep.Duplicates))
	if len(rep.Missing) > 0 || len(rep.Duplicates) > 0 {
		t.Errorf("missing %v, duplicated %v", rep.Missing, rep.Duplicates)
	}
	extra := map[string]bool{}
	for _, id := range rep.Extra {
		extra[id] = true
	}
	for _, id := range orphans {
		if !extra[id] {
			t.Errorf("event %s, published before the failover and absent from the new primary, is not reported extra", id)
			break
		}
	}
	if len(rep.Extra) != len(orphans) {
		t.Errorf("%d extra messages, want exactly the %d events the standby never received", len(rep.Extra), len(orphans))
	}
}

// txRetry commits rows in one transaction, retrying while the pool's
// connections to a dead primary fail.
func txRetry(t *testing.T, env *relaytest.Env, rows ...relaytest.Row) {
	t.Helper()
	deadline := time.Now().Add(relaytest.FaultWait)
	for {
		_, err := env.TryTx(rows...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("write after the failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFailoverStandbyInstanceTakesOver (Postgres 17+): a relay with
// --failover that starts while another instance, without it, streams from
// the slot cannot alter the slot then; it waits as a standby instance and
// makes the slot a failover slot when it takes over.
func TestFailoverStandbyInstanceTakesOver(t *testing.T) {
	env := suite.NewEnv(t)
	var version int
	if err := env.Pool.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 170000 {
		relaytest.Skip(t, "needs Postgres 17 or later (the test cluster runs %d): run with OUTBOX_TEST_PG_BINDIR=$(scripts/install-postgres.sh 17)", version)
	}
	active := suite.StartRelay(t, env)
	active.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	standby := suite.StartRelay(t, env, "--failover")
	standby.WaitLog("waiting as a standby", relaytest.FaultWait)
	relaytest.RequireLog(t, standby, "this relay makes it one when it takes the slot over", 1)
	if slotFailover(t, env) {
		t.Fatal("the slot became a failover slot while another instance streamed from it")
	}
	active.Kill()
	standby.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.WaitLogCount(t, standby, logMadeFailover, 1, relaytest.FaultWait)
	if !slotFailover(t, env) {
		t.Errorf("slot %s is not a failover slot after the --failover instance took it over", env.Slot)
	}
	ids := env.Tx(relaytest.NewRow("t", "a1", "after", `{"n": 1}`))
	env.WaitRows(relaytest.FaultWait)
	standby.Drain(30 * time.Second)
	env.Check()
	t.Logf("published %s after the take-over", ids[0])
}

// slotFailover reads pg_replication_slots.failover of the test slot.
func slotFailover(t *testing.T, env *relaytest.Env) bool {
	t.Helper()
	var on bool
	if err := env.Pool.QueryRow(context.Background(), `SELECT failover FROM pg_replication_slots WHERE slot_name = $1`, env.Slot).Scan(&on); err != nil && err != pgx.ErrNoRows {
		t.Fatalf("read the slot's failover flag: %v", err)
	}
	return on
}

// requireTimelines checks the source stamps of the first and the last
// message: one system, the first on timeline 1, the last (written after
// the promotion) on a later one.
func requireTimelines(t *testing.T, env *relaytest.Env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := env.StreamHandle(10 * time.Second)
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.GetMsg(ctx, info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	sys := func(m *jetstream.RawStreamMsg) string { return m.Header.Get(contract.HeaderSourceSystem) }
	tl := func(m *jetstream.RawStreamMsg) string { return m.Header.Get(contract.HeaderSourceTimeline) }
	t.Logf("first message: system %s timeline %s; last: system %s timeline %s", sys(first), tl(first), sys(last), tl(last))
	if sys(first) == "" || sys(first) != sys(last) {
		t.Errorf("the messages name systems %q and %q: want the same one across the promotion", sys(first), sys(last))
	}
	if tl(first) != "1" || tl(last) == "1" || tl(last) == "" {
		t.Errorf("the messages carry timelines %q then %q: want 1, then the promoted standby's", tl(first), tl(last))
	}
}

// TestStandbyRelayRefused: the relay pointed at a hot standby stops at
// once and says why and what to do: it writes its record of the slot into
// the database, which a standby refuses (docs/failover.md, "Reading from a
// standby"), unless --primary-url names the primary (docs/standby.md),
// which needs Postgres 16+: below 16 that is refused too. It creates no
// slot there. Any Postgres version.
func TestStandbyRelayRefused(t *testing.T) {
	pair := relaytest.StartPair(t, relaytest.PairOptions{})
	env := relaytest.NewEnv(t, pair)
	pair.WaitReplayed()
	env.RelayPG = pair.Standby.URL(env.Database)
	relay := suite.StartRelay(t, env)
	if code := relay.Wait(relaytest.FaultWait); code == 0 {
		t.Fatalf("the relay pointed at a standby exited 0; log:\n%s", relay.Logs())
	}
	for _, want := range []string{"is a standby (in recovery)", "target_session_attrs=read-write", "add --primary-url"} {
		if !strings.Contains(relay.Logs(), want) {
			t.Errorf("the relay's refusal does not say %q; log:\n%s", want, relay.Logs())
		}
	}
	if pair.Primary.MajorVersion() < standbyReadMajor {
		old := suite.StartRelay(t, env, "--primary-url", pair.Primary.URL(env.Database))
		if code := old.Wait(relaytest.FaultWait); code == 0 {
			t.Fatalf("the relay reading from a Postgres %d standby exited 0; log:\n%s", pair.Primary.MajorVersion(), old.Logs())
		}
		relaytest.RequireLog(t, old, "logical decoding on a standby needs Postgres 16 or later", 1)
	}
	var slots int
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pair.Standby.URL(env.Database))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Errorf("the standby holds %d replication slots after the relay refused it", slots)
	}
	if pair.Primary.MajorVersion() >= standbyReadMajor {
		standbyReadRefusals(t, pair, env)
	}
}
