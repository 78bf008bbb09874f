package relaytest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// FailoverMajor is the first Postgres major version with failover slots
// (and the one whose slot synchronisation the failover tests rely on).
const FailoverMajor = 17

// StandbySlot is the physical slot of a Pair's standby on its primary, and
// the standby's application_name (synchronous_standby_names names it).
const StandbySlot = "standby1"

// Pair is a primary and a physical standby of it, each a private cluster,
// for tests of failover and of logical decoding on a standby. As a Server
// its URLs name both hosts with target_session_attrs=read-write, so they
// reach whichever one is the primary.
type Pair struct {
	T       testing.TB
	Primary *devenv.Postgres
	Standby *devenv.Postgres
	// Link carries the standby's replication connection to the primary: a
	// test cuts it to leave the standby behind.
	Link *Proxy
}

// PairOptions says how a Pair is set up.
type PairOptions struct {
	// Failover makes the standby sync failover slots
	// (sync_replication_slots; Postgres 17+: the test is skipped below, see
	// RequireMajor).
	Failover bool
	// Guard sets the primary up the way docs/failover.md asks: the standby
	// synchronous (a commit the workload saw succeed survives the
	// primary's death; the relay's record too) and in
	// synchronized_standby_slots (logical walsenders send nothing it has
	// not received).
	Guard bool
}

// RequireMajor skips the test (Skip) unless the test cluster runs Postgres
// major or later: the default binaries of the test machine are older, and
// the CI runs these tests in steps of their own with
// OUTBOX_TEST_PG_BINDIR=$(scripts/install-postgres.sh 17) (and 18), where a
// skip fails the step.
func RequireMajor(t testing.TB, major int, primary *devenv.Postgres) {
	t.Helper()
	if primary.MajorVersion() < major {
		Skip(t, "needs Postgres %d or later (the test cluster runs %d): run with %s=$(scripts/install-postgres.sh %d)",
			major, primary.MajorVersion(), devenv.BinDirEnv, major)
	}
}

// StartPair starts a primary and a standby streaming from it (through
// Link) on the physical slot StandbySlot, with hot_standby_feedback (the
// standby's logical slots need the primary to keep their catalog rows).
func StartPair(t testing.TB, opts PairOptions) *Pair {
	t.Helper()
	if opts.Failover && os.Getenv(devenv.BinDirEnv) == "" {
		Skip(t, "needs Postgres %d or later: run with %s=$(scripts/install-postgres.sh %d)", FailoverMajor, devenv.BinDirEnv, FailoverMajor)
	}
	primarySettings := map[string]string{}
	if opts.Guard {
		primarySettings["synchronized_standby_slots"] = "'" + StandbySlot + "'"
		primarySettings["synchronous_standby_names"] = "'" + StandbySlot + "'"
	}
	primary, err := StartCluster(primarySettings)
	if err != nil {
		t.Fatal(err)
	}
	p := &Pair{T: t, Primary: primary}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("primary log:\n%s", tail(primary.Log(), 40))
			if p.Standby != nil {
				t.Logf("standby log:\n%s", tail(p.Standby.Log(), 40))
			}
		}
		primary.Close()
	})
	if opts.Failover {
		RequireMajor(t, FailoverMajor, primary)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.exec(ctx, primary.URL("postgres"), `SELECT pg_create_physical_replication_slot($1, true)`, StandbySlot)
	p.Link = StartProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.Port))
	settings := map[string]string{
		"primary_conninfo":     fmt.Sprintf("'host=127.0.0.1 port=%d user=postgres dbname=postgres application_name=%s'", p.Link.Port(), StandbySlot),
		"primary_slot_name":    "'" + StandbySlot + "'",
		"hot_standby_feedback": "on",
	}
	if opts.Failover {
		settings["sync_replication_slots"] = "on"
	}
	for k, v := range ClusterSettings {
		settings[k] = v
	}
	if p.Standby, err = primary.CloneStandby(ctx, settings); err != nil {
		t.Fatalf("start the standby: %v", err)
	}
	t.Cleanup(func() { p.Standby.Close() })
	p.waitStreaming()
	return p
}

// URL returns a superuser connection string for database db that reaches
// whichever of the two servers accepts writes.
func (p *Pair) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		p.Primary.Port, p.Standby.Port, db)
}

// waitStreaming waits until the primary sees the standby streaming.
func (p *Pair) waitStreaming() {
	p.T.Helper()
	p.poll("the standby streaming from the primary", p.Primary.URL("postgres"),
		`SELECT count(*) > 0 FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, StandbySlot)
}

// WaitReplayed waits until the standby has replayed all WAL the primary
// has written so far (a database just created there, for example).
func (p *Pair) WaitReplayed() {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.Primary.URL("postgres"))
	if err != nil {
		p.T.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var at string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&at); err != nil {
		p.T.Fatal(err)
	}
	p.poll("the standby to replay up to "+at, p.Standby.URL("postgres"), `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, at)
}

// WaitSlotSynced waits until the standby holds a synchronised, persistent
// copy of slot (created by the slot sync worker, not temporary any more):
// from then on a promotion keeps it.
func (p *Pair) WaitSlotSynced(slot string) {
	p.T.Helper()
	p.poll("the standby's synced copy of slot "+slot, p.Standby.URL("postgres"),
		`SELECT count(*) > 0 FROM pg_replication_slots WHERE slot_name = $1 AND synced AND NOT temporary`, slot)
}

// poll runs query (a boolean) on url until it is true, for up to two
// minutes; slot synchronisation naps up to 30 s between rounds.
func (p *Pair) poll(what, url, query string, args ...any) {
	p.T.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		ok, err := queryBool(url, query, args...)
		if ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	p.T.Fatalf("waited 2m for %s (last error: %v)", what, last)
}

// LogStandbySnapshot writes a running-xacts record on the primary
// (pg_log_standby_snapshot): a logical slot being created on the standby
// waits for one, which Postgres otherwise writes every 15 s or so.
func (p *Pair) LogStandbySnapshot(url string) {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.exec(ctx, url, `SELECT pg_log_standby_snapshot()`)
}

func (p *Pair) exec(ctx context.Context, url, sql string, args ...any) {
	p.T.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		p.T.Fatalf("connect to %s: %v", url, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		p.T.Fatalf("%s: %v", firstLine(sql), err)
	}
}

func queryBool(url, query string, args ...any) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	err = conn.QueryRow(ctx, query, args...).Scan(&ok)
	return ok, err
}

// WaitTrue waits, up to two minutes, until query (a boolean) is true on
// the server at url; what names the awaited state in the failure.
func (p *Pair) WaitTrue(what, url, query string, args ...any) {
	p.T.Helper()
	p.poll(what, url, query, args...)
}
