package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/devenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

type devCmd struct {
	// No environment variables for the servers: dev writes demo orders
	// and events, and an OUTBOX_PG_URL exported for the relay must never
	// send them into a real database. Only the flags point dev elsewhere.
	PGURL       string  `name:"pg-url" help:"Use this Postgres (wal_level=logical) instead of a throwaway cluster: dev creates the example's tables there and writes demo orders and events. Never read from OUTBOX_PG_URL."`
	NATSURL     string  `name:"nats-url" help:"Use this NATS (JetStream enabled) instead of an embedded server: dev publishes demo events there. Never read from OUTBOX_NATS_URL."`
	Rate        float64 `name:"rate" default:"2" help:"Demo orders per second."`
	Count       int     `name:"count" default:"0" help:"Stop after this many orders arrived (0 runs until Ctrl-C)."`
	MetricsAddr string  `name:"metrics-addr" env:"OUTBOX_METRICS_ADDR" default:"127.0.0.1:9464" help:"Address for /metrics, /healthz and /readyz; empty disables."`
}

// devEnv is what `dev` started and must clean up.
type devEnv struct {
	pg   *devenv.Postgres
	nats *devenv.NATS
}

func (e *devEnv) close() {
	if e.nats != nil {
		e.nats.Close()
	}
	if e.pg != nil {
		e.pg.Close()
	}
}

func (c *devCmd) Run(ctx context.Context, log zerolog.Logger) error {
	if c.Rate <= 0 {
		return fmt.Errorf("--rate %v: must be positive", c.Rate)
	}
	env := &devEnv{}
	defer env.close()
	pgURL, natsURL, err := c.servers(ctx, env)
	if err != nil {
		return err
	}
	// Every tuning knob at its package's default.
	n, err := defaultNames().parse()
	if err != nil {
		return err
	}
	cfg := n.relayConfig()
	cfg.PGURL = pgURL
	poolCfg, _, err := replication.ParseConnString(pgURL)
	if err != nil {
		return err
	}
	if _, err := migrations.Apply(ctx, poolCfg.ConnConfig, migrations.Names{Table: cfg.Table, Publication: cfg.Publication}); err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id BIGSERIAL PRIMARY KEY, customer_id TEXT NOT NULL, total NUMERIC(10,2) NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create the demo orders table: %w", err)
	}

	// The relay runs until the demo ends; its SIGTERM path drains and confirms.
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	relayDone := make(chan error, 1)
	go func() {
		relayDone <- serveRelay(relayCtx, cfg, natsFlags{NATSURL: natsURL}, c.MetricsAddr, log.With().Str("side", "relay").Logger())
	}()
	demoErr := c.demo(ctx, pool, natsURL, cfg, relayDone)
	stopRelay()
	relayErr := <-relayDone
	return errors.Join(demoErr, relayErr)
}

func defaultNames() nameFlags {
	return nameFlags{Slot: replication.DefaultSlot, Publication: replication.DefaultPublication, Table: defaultTable,
		Stream: sink.DefaultStream, Subject: sink.DefaultSubject, DeadLetterSubject: sink.DefaultDeadLetterSubject,
		DuplicateWindow: sink.DefaultDuplicateWindow}
}

// servers starts what the user did not point at.
func (c *devCmd) servers(ctx context.Context, env *devEnv) (pgURL, natsURL string, err error) {
	pgURL, natsURL = c.PGURL, c.NATSURL
	if pgURL == "" {
		if env.pg, err = devenv.StartPostgres(ctx, devenv.PostgresOptions{}); err != nil {
			return "", "", fmt.Errorf("start a throwaway Postgres (or pass --pg-url): %w", err)
		}
		pgURL = env.pg.URL("postgres")
		fmt.Printf("postgres  throwaway cluster from %s on 127.0.0.1:%d (data in %s, removed at exit)\n", env.pg.BinDir(), env.pg.Port, env.pg.Dir)
	}
	if natsURL == "" {
		if env.nats, err = devenv.StartNATS(devenv.NATSOptions{}); err != nil {
			return "", "", fmt.Errorf("start an embedded NATS server (or pass --nats-url): %w", err)
		}
		natsURL = env.nats.URL()
		fmt.Printf("nats      embedded server with JetStream at %s\n", natsURL)
	}
	return pgURL, natsURL, nil
}

// demo writes orders the seed article's way (order row and outbox row in
// one transaction) and prints the events as they reach the stream.
func (c *devCmd) demo(ctx context.Context, pool *pgxpool.Pool, natsURL string, n relay.Config, relayDone <-chan error) error {
	nc, err := nats.Connect(natsURL, nats.Name("outbox-relay dev consumer"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := waitForStream(ctx, js, n.Stream, relayDone)
	if err != nil {
		return err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{n.Subject.Filter()}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return fmt.Errorf("consume stream %q: %w", n.Stream, err)
	}
	w := &demoWriter{pool: pool, table: n.Table.Quoted(), commits: map[string]time.Time{}}
	received := make(chan jetstream.Msg, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) { received <- m })
	if err != nil {
		return err
	}
	defer cc.Stop()

	fmt.Printf("\nwriting %v orders/s; each commits an order row and an outbox row in one transaction. Ctrl-C stops and cleans up.\n\n", c.Rate)
	tick := time.NewTicker(time.Duration(float64(time.Second) / c.Rate))
	defer tick.Stop()
	var latencies []time.Duration
	for c.Count == 0 || len(latencies) < c.Count {
		select {
		case <-ctx.Done():
			printSummary(w.written(), latencies)
			return nil
		case err := <-relayDone:
			return fmt.Errorf("the relay stopped: %w", err)
		case <-tick.C:
			if c.Count == 0 || w.written() < c.Count {
				if err := w.order(ctx); err != nil {
					return err
				}
			}
		case m := <-received:
			latencies = append(latencies, w.show(m))
		}
	}
	printSummary(w.written(), latencies)
	return nil
}

func waitForStream(ctx context.Context, js jetstream.JetStream, name string, relayDone <-chan error) (jetstream.Stream, error) {
	for {
		stream, err := js.Stream(ctx, name)
		if err == nil {
			return stream, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-relayDone:
			return nil, fmt.Errorf("the relay stopped: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// demoWriter writes demo orders and remembers when each event committed.
type demoWriter struct {
	pool    *pgxpool.Pool
	table   string
	mu      sync.Mutex
	commits map[string]time.Time
	n       int
}

func (w *demoWriter) written() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *demoWriter) order(ctx context.Context) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var orderID int64
	customer := fmt.Sprintf("customer-%d", w.written()%3+1)
	total := float64(10+w.written()%90) + 0.99
	if err := tx.QueryRow(ctx, `INSERT INTO orders (customer_id, total) VALUES ($1, $2) RETURNING id`, customer, total).Scan(&orderID); err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	payload, _ := json.Marshal(map[string]any{"order_id": orderID, "customer_id": customer, "total": total})
	var eventID string
	if err := tx.QueryRow(ctx, `INSERT INTO `+w.table+` (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', $1, 'order.created', $2) RETURNING id::text`, fmt.Sprint(orderID), payload).Scan(&eventID); err != nil {
		return fmt.Errorf("insert outbox event: %w", err)
	}
	committing := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	w.mu.Lock()
	w.commits[eventID] = committing
	w.n++
	w.mu.Unlock()
	return nil
}

// show prints one received event and returns its commit-to-stream latency.
func (w *demoWriter) show(m jetstream.Msg) time.Duration {
	id := m.Headers().Get(sink.HeaderMsgID)
	meta, _ := m.Metadata()
	w.mu.Lock()
	committed, ok := w.commits[id]
	w.mu.Unlock()
	var lat time.Duration
	latency := "?"
	if ok && meta != nil {
		lat = meta.Timestamp.Sub(committed)
		latency = fmt.Sprintf("%.1f ms", float64(lat.Microseconds())/1000)
	}
	fmt.Printf("event %-14s aggregate %s %-4s  commit→stream %-9s  subject %s  lsn %s\n",
		m.Headers().Get(sink.HeaderEventType), m.Headers().Get(sink.HeaderAggregateType), m.Headers().Get(sink.HeaderAggregateID),
		latency, m.Subject(), m.Headers().Get(sink.HeaderCommitLSN))
	return lat
}

func printSummary(written int, latencies []time.Duration) {
	if len(latencies) == 0 {
		fmt.Printf("\n%d orders written, no events received yet\n", written)
		return
	}
	sorted := append([]time.Duration(nil), latencies...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	q := func(p float64) time.Duration { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	fmt.Fprintf(os.Stdout, "\n%d orders written, %d events received; commit→stream p50 %s, p99 %s, max %s\n",
		written, len(latencies), q(0.5).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), sorted[len(sorted)-1].Round(10*time.Microsecond))
}
