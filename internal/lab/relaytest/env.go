// Package relaytest is the support for tests that run the relay against
// real servers: a private Postgres cluster, an embedded NATS server per
// test, the relay as a child process, a write workload and the final
// table-versus-stream check.
package relaytest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

// ClusterSettings are the Postgres settings of test clusters: a short
// wal_sender_timeout so that a relay that stops answering is noticed in
// seconds, room for many slots, and no fsync (crashes in these tests are
// process kills, which lose nothing that was written).
var ClusterSettings = map[string]string{
	"wal_sender_timeout":    "5s",
	"max_wal_senders":       "40",
	"max_replication_slots": "40",
	"max_connections":       "300",
	"fsync":                 "off",
	"full_page_writes":      "off",
}

// StartCluster starts a private cluster for a test binary and prints which
// Postgres it runs (shown with -v or when the package fails). Set
// OUTBOX_TEST_PG_BINDIR to test another major version (see devenv). Without
// Postgres server binaries it fails and says so: tests never skip for that.
func StartCluster(settings map[string]string, initArgs ...string) (*devenv.Postgres, error) {
	merged := map[string]string{}
	for k, v := range ClusterSettings {
		merged[k] = v
	}
	for k, v := range settings {
		merged[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := devenv.StartPostgres(ctx, devenv.PostgresOptions{Settings: merged, InitArgs: initArgs})
	if err != nil {
		return nil, fmt.Errorf("tests need a Postgres server: %w", err)
	}
	fmt.Fprintf(os.Stderr, "test cluster: PostgreSQL %d from %s\n", pg.MajorVersion(), pg.BinDir())
	return pg, nil
}

// Server is a Postgres server tests create databases in.
type Server interface {
	// URL returns a superuser connection string for database db.
	URL(db string) string
}

// ExternalServer is a server given by OUTBOX_TEST_PG_URL (any database on
// it; the role must be allowed to create databases and slots).
type ExternalServer string

// URL replaces the database of the connection string.
func (s ExternalServer) URL(db string) string {
	cfg, err := pgx.ParseConfig(string(s))
	if err != nil {
		return string(s)
	}
	return fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Password, cfg.Host, cfg.Port, db)
}

// Env is one test's world: its own database in a shared cluster, its own
// NATS server, the default names.
type Env struct {
	T        testing.TB
	Cluster  Server
	Database string
	PGURL    string
	Pool     *pgxpool.Pool
	NATS     *devenv.NATS
	NATSURL  string
	NC       *nats.Conn
	JS       jetstream.JetStream
	Table    contract.Table
	// MoreTables are further outbox tables of the relay (see UseTables):
	// RelayArgs and ToolArgs name them after Table.
	MoreTables []contract.Table
	// RelayPG and RelayNATS, when set, are where the relay connects
	// instead of the test's own servers (a fault proxy, another server).
	RelayPG   string
	RelayNATS string
	// SlotPool, when set, is where the relay's slot lives (a standby the
	// relay reads from: see docs/standby.md); SlotInfo and
	// WaitSlotCaughtUp read the slot there, the WAL position on Pool.
	SlotPool *pgxpool.Pool
	// DuplicateWindow is the dedup window of a stream the relay creates
	// (--duplicate-window): 1 s, so that an event the relay publishes
	// again is stored twice and the check sees it, where the default two
	// minutes would hide it.
	DuplicateWindow time.Duration
	Slot            string
	Pub             string
	Stream          string
	Subject         string
	// SubjectDots is --subject-dots ("" leaves the relay's default).
	SubjectDots string
	DeadSubj    string
}

var dbCounter atomic.Int64

// NewEnv creates a database in cluster, applies the migrations and starts
// an embedded NATS server. Everything is removed when the test ends.
func NewEnv(t testing.TB, cluster Server) *Env {
	t.Helper()
	e := &Env{
		T: t, Cluster: cluster,
		Database: fmt.Sprintf("t%d_%d", os.Getpid(), dbCounter.Add(1)),
		Table:    contract.DefaultTable,
		Pub:      contract.DefaultPublication, Stream: contract.DefaultStream,
		Subject: contract.DefaultSubject, DeadSubj: contract.DefaultDeadLetterSubject,
		DuplicateWindow: time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatalf("connect to the test cluster: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+e.Database); err != nil {
		t.Fatalf("create database: %v", err)
	}
	e.Slot = "relay_" + e.Database // slot names are cluster-wide
	e.PGURL = cluster.URL(e.Database)
	t.Cleanup(func() { e.dropDatabase() })
	e.Pool = e.OpenPool()
	e.Migrate()
	e.StartNATS(devenv.NATSOptions{})
	return e
}

// OpenPool opens a pool on the test database, closed at the end.
func (e *Env) OpenPool() *pgxpool.Pool { return e.OpenPoolWith(func(*pgxpool.Config) {}) }

// OpenPoolWith opens a pool on the test database with its settings changed
// by edit (another role, a tracer), closed at the end.
func (e *Env) OpenPoolWith(edit func(*pgxpool.Config)) *pgxpool.Pool {
	cfg, _, err := replication.ParseConnString(e.PGURL)
	if err != nil {
		e.T.Fatal(err)
	}
	cfg.MaxConns = 32
	edit(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(pool.Close)
	return pool
}

// Migrate applies the relay's migrations to the test database.
func (e *Env) Migrate() {
	cfg, err := pgx.ParseConfig(e.PGURL)
	if err != nil {
		e.T.Fatal(err)
	}
	if _, err := migrations.Apply(context.Background(), cfg, migrations.Names{Table: e.Table, Publication: e.Pub}); err != nil {
		e.T.Fatalf("migrate: %v", err)
	}
}

// StartNATS starts the test's NATS server (replacing none).
func (e *Env) StartNATS(opts devenv.NATSOptions) {
	n, err := devenv.StartNATS(opts)
	if err != nil {
		e.T.Fatalf("start nats: %v", err)
	}
	e.NATS = n
	e.T.Cleanup(n.Close)
	e.UseNATS(n.URL())
}

// UseNATS points the test and the relay at other NATS servers.
func (e *Env) UseNATS(urls string) {
	if e.NC != nil {
		e.NC.Close()
	}
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		e.T.Fatalf("connect to nats: %v", err)
	}
	e.T.Cleanup(nc.Close)
	e.NC, e.NATSURL = nc, urls
	if e.JS, err = jetstream.New(nc); err != nil {
		e.T.Fatal(err)
	}
}

func (e *Env) dropDatabase() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, e.Cluster.URL("postgres"))
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	// Slots pin the database; drop them first (terminating their users).
	for ctx.Err() == nil {
		var active int
		if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`,
			e.Database).Scan(&active); err != nil || active == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, _ = admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, e.Database)
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.Database+" WITH (FORCE)")
}

// PGAddr returns the test database's host:port.
func (e *Env) PGAddr() string {
	cfg, err := pgx.ParseConfig(e.PGURL)
	if err != nil {
		e.T.Fatal(err)
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

// PGURLVia returns the test database's URL reached through addr.
func (e *Env) PGURLVia(addr string) string {
	return strings.Replace(e.PGURL, e.PGAddr(), addr, 1)
}

// ClusterLog returns the Postgres server log ("" for an external server).
func (e *Env) ClusterLog() string {
	if l, ok := e.Cluster.(interface{ Log() string }); ok {
		return l.Log()
	}
	return ""
}

// RelayArgs are the flags that point a relay at this Env: its servers (or
// RelayPG, RelayNATS), its names, the Env's DuplicateWindow, and metrics on
// a free loopback port (Relay.Metric reads them). Flags given after these
// override them.
func (e *Env) RelayArgs() []string {
	pg, nurl := e.PGURL, e.NATSURL
	if e.RelayPG != "" {
		pg = e.RelayPG
	}
	if e.RelayNATS != "" {
		nurl = e.RelayNATS
	}
	args := append(e.toolArgs(pg, nurl), "--metrics-addr", "127.0.0.1:0")
	if e.DuplicateWindow > 0 {
		args = append(args, "--duplicate-window", e.DuplicateWindow.String())
	}
	if FastIngest() {
		args = append(args, "--stream-allow-batched")
	}
	return args
}

// ToolArgs are the flags that point an operator command (verify, dlq,
// status) at this Env.
func (e *Env) ToolArgs() []string { return e.toolArgs(e.PGURL, e.NATSURL) }

func (e *Env) toolArgs(pg, nurl string) []string {
	args := []string{
		"--pg-url", pg, "--nats-url", nurl,
		"--slot", e.Slot, "--publication", e.Pub, "--table", e.Table.String(),
		"--stream", e.Stream, "--subject", e.Subject, "--dead-letter-subject", e.DeadSubj,
		"--log-format", "json",
	}
	for _, t := range e.MoreTables {
		args = append(args, "--table", t.String())
	}
	if e.SubjectDots != "" {
		args = append(args, "--subject-dots", e.SubjectDots)
	}
	return args
}

// Exec runs SQL on the test database.
func (e *Env) Exec(sql string, args ...any) {
	e.T.Helper()
	if _, err := e.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.T.Fatalf("%s: %v", firstLine(sql), err)
	}
}

// StreamHandle opens the relay's stream, waiting for it to exist.
func (e *Env) StreamHandle(timeout time.Duration) jetstream.Stream {
	e.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := e.JS.Stream(ctx, e.Stream)
		cancel()
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("stream %s did not appear within %s: %v", e.Stream, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SlotInfo reads the test slot.
func (e *Env) SlotInfo() replication.SlotInfo {
	e.T.Helper()
	pool := e.Pool
	if e.SlotPool != nil {
		pool = e.SlotPool
	}
	info, err := replication.LookupSlot(context.Background(), pool, e.Slot)
	if err != nil {
		e.T.Fatal(err)
	}
	return info
}

// WALPosition returns the server's current WAL insert position.
func (e *Env) WALPosition() pglogrepl.LSN {
	e.T.Helper()
	var lsn pglogrepl.LSN
	if err := e.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		e.T.Fatal(err)
	}
	return lsn
}

// WaitSlotCaughtUp waits until the slot has confirmed all WAL written so
// far (confirmed_flush_lsn >= pg_current_wal_lsn() read now). Called
// after the writes end, it means the relay holds a PubAck for every
// committed event and has nothing left to send: what the stream holds then
// is final until a relay starts again. It fails the test after timeout.
func (e *Env) WaitSlotCaughtUp(timeout time.Duration) {
	e.T.Helper()
	target := e.WALPosition()
	deadline := time.Now().Add(timeout)
	for {
		confirmed := e.SlotInfo().ConfirmedFlush
		if confirmed >= target {
			return
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("the slot confirmed %s after %s, short of the WAL position %s at the end of the writes", confirmed, timeout, target)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i > 0 {
		return s[:i]
	}
	return s
}

// RunWithServer is a test binary's TestMain: it opens the Postgres the
// tests create their databases in (OpenServer) into *srv, runs them, closes
// the server and exits with their code. Without Postgres the tests fail,
// never skip.
func RunWithServer(m *testing.M, srv *Server) { os.Exit(runWithServer(m, srv)) }

// runWithServer is RunWithServer without the exit: it returns the code.
func runWithServer(m *testing.M, srv *Server) int {
	s, closeServer, err := OpenServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	*srv = s
	code := m.Run()
	closeServer()
	return code
}

// OpenServer returns the Postgres a test binary creates its databases in:
// OUTBOX_TEST_PG_URL when set, otherwise a private cluster that close
// removes. Without Postgres server binaries it fails: tests never skip.
func OpenServer() (srv Server, close func(), err error) {
	if url := os.Getenv("OUTBOX_TEST_PG_URL"); url != "" {
		return ExternalServer(url), func() {}, nil
	}
	cluster, err := StartCluster(nil)
	if err != nil {
		return nil, nil, err
	}
	return cluster, func() { cluster.Close() }, nil
}
