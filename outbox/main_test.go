package outbox_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// server is the Postgres the tests create their databases in: a private
// cluster, or OUTBOX_TEST_PG_URL.
var server relaytest.Server

func TestMain(m *testing.M) {
	srv, closeServer, err := relaytest.OpenServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	server = srv
	// The examples read DATABASE_URL, as an application would.
	db, err := exampleDatabase()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: example database:", err)
		closeServer()
		os.Exit(1)
	}
	os.Setenv("DATABASE_URL", server.URL(db))
	code := m.Run()
	dropDatabase(db)
	closeServer()
	os.Exit(code)
}

// exampleDatabase creates a migrated database for the examples.
func exampleDatabase() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := fmt.Sprintf("outbox_example_%d", os.Getpid())
	admin, err := pgx.Connect(ctx, server.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return "", err
	}
	cfg, err := pgx.ParseConfig(server.URL(db))
	if err != nil {
		return "", err
	}
	names := migrations.Names{Table: contract.Table{Schema: "public", Name: "outbox_events"}, Publication: "outbox_pub"}
	if _, err := migrations.Apply(ctx, cfg, names); err != nil {
		return "", err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE orders (id text NOT NULL, customer_id text NOT NULL, total numeric NOT NULL)`)
	return db, err
}

func dropDatabase(db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if admin, err := pgx.Connect(ctx, server.URL("postgres")); err == nil {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		admin.Close(ctx)
	}
}

// counter counts the statements a connection sends.
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedPool opens a pool on env's database whose statements c counts.
func tracedPool(t *testing.T, env *relaytest.Env, c *counter) *pgxpool.Pool {
	t.Helper()
	return env.OpenPoolWith(func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = c })
}
