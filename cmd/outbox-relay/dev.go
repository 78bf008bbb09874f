//go:build !nolab

package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/examples/orders/demo"
	"github.com/outbox-relay/outbox-relay/examples/orders/orders"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

type devCmd struct {
	// No environment variables for the servers: dev writes demo orders
	// and events, and an OUTBOX_PG_URL exported for the relay must never
	// send them into a real database. Only the flags point dev elsewhere.
	PGURL       string  `name:"pg-url" help:"Use this Postgres (wal_level=logical) instead of a throwaway cluster: dev creates the example's tables there and writes demo orders and events. Never read from OUTBOX_PG_URL."`
	NATSURL     string  `name:"nats-url" help:"Use this NATS (JetStream enabled) instead of an embedded server: dev publishes demo events there. Never read from OUTBOX_NATS_URL."`
	Rate        float64 `name:"rate" default:"2" help:"Demo orders per second."`
	Count       int     `name:"count" default:"0" help:"Stop after this many orders were consumed (0 runs until Ctrl-C)."`
	MetricsAddr string  `name:"metrics-addr" env:"OUTBOX_METRICS_ADDR" default:"${metrics_addr}" help:"Address for /metrics, /healthz and /readyz; empty disables."`
	// formatFlags: with --format cloudevents the demo shows each
	// CloudEvent as the stream holds it.
	formatFlags `embed:""`
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
	if n.format, err = c.formatFlags.parse(pgURL, n.table); err != nil {
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
	if err := orders.Migrate(ctx, pool); err != nil {
		return err
	}

	// The relay runs until the demo ends; its SIGTERM path drains and confirms.
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	relayDone := make(chan error, 1)
	go func() {
		relayDone <- serveRelay(relayCtx, cfg, jetstream.NATSOptions{URL: natsURL}, c.MetricsAddr, log.With().Str("side", "relay").Logger())
	}()
	demoErr := demo.Run(ctx, demo.Config{Pool: pool, NATSURL: natsURL, Relay: cfg, Rate: c.Rate, Count: c.Count, RelayDone: relayDone, Out: os.Stdout})
	stopRelay()
	relayErr := <-relayDone
	return errors.Join(demoErr, relayErr)
}

func defaultNames() nameFlags {
	return nameFlags{Slot: contract.DefaultSlot, Publication: contract.DefaultPublication, Table: []string{contract.DefaultTable.String()},
		Stream: contract.DefaultStream, Subject: contract.DefaultSubject, DeadLetterSubject: contract.DefaultDeadLetterSubject,
		DuplicateWindow: jetstream.DefaultDuplicateWindow}
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
