package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replication"
)

// tools are the connections an operator command needs.
type tools struct {
	pool   *pgxpool.Pool
	nc     *nats.Conn
	stream *jssink.Stream
	store  *checkpoint.Store
	table  contract.Table
	pgURL  string // what republished messages name as their source
}

func openPoolOnly(ctx context.Context, pgURL string) (*pgxpool.Pool, error) {
	poolCfg, _, err := replication.ParseConnString(pgURL)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, poolCfg)
}

// pingPool opens a pool and makes sure Postgres answers, for a command
// that runs once.
func pingPool(ctx context.Context, pgURL string) (*pgxpool.Pool, error) {
	poolCfg, _, err := replication.ParseConnString(pgURL)
	if err != nil {
		return nil, err
	}
	return pingConfig(ctx, poolCfg)
}

// pingConfig opens a pool with poolCfg and checks that the server answers.
func pingConfig(ctx context.Context, poolCfg *pgxpool.Config) (*pgxpool.Pool, error) {
	where := replication.Describe(&poolCfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres at %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to Postgres at %s: %w", where, err)
	}
	return pool, nil
}

func openTools(ctx context.Context, pgURL string, nf natsFlags, n names) (*tools, error) {
	poolCfg, _, err := replication.ParseConnString(pgURL)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, err
	}
	t := &tools{pool: pool, table: n.table, store: checkpoint.NewStore(pool, n.table.Schema, n.slot), pgURL: pgURL}
	if t.nc, err = nats.Connect(nf.NATSURL, nf.options().Auth()...); err != nil {
		t.close()
		return nil, jssink.ExplainNATSConnect(ctx, err, nf.NATSURL)
	}
	if t.stream, err = jssink.OpenExisting(ctx, t.nc, n.publishing().StreamSpec()); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *tools) close() {
	if t.nc != nil {
		t.nc.Close()
	}
	t.pool.Close()
}

// republish publishes the rows with the given ids from the table.
func (t *tools) republish(ctx context.Context, n names, ids []string, log zerolog.Logger) error {
	_, count, err := t.publishIDs(ctx, n, ids, log, nil)
	if err != nil {
		return err
	}
	log.Info().Int("published", count).Msg("republished the missing rows")
	return nil
}

// publishIDs publishes the rows with the given keys (ids, qualified by
// their table when the relay reads several: see relay.RowSource.EachKey),
// in commit order, and waits for their PubAcks. admit, when set, sees every row
// found, with the publisher, and may hold it back. It returns the
// publisher (to ask what was dead-lettered) and how many rows were found.
func (t *tools) publishIDs(ctx context.Context, n names, ids []string, log zerolog.Logger, admit func(*relay.OneShot, *decode.Event) bool) (*relay.OneShot, int, error) {
	src, err := relay.NewRowSource(ctx, t.pool, n.table, n.more...)
	if err != nil {
		return nil, 0, err
	}
	cfg := n.relayConfig()
	cfg.PGURL = t.pgURL
	o, err := relay.NewOneShot(ctx, t.stream, cfg, t.store, log)
	if err != nil {
		return nil, 0, err
	}
	count, err := src.EachKey(ctx, t.pool, "", ids, func(ev *decode.Event) error {
		if admit != nil && !admit(o, ev) {
			return nil
		}
		return o.Publish(ctx, ev)
	})
	if ferr := o.Finish(ctx); err == nil {
		err = ferr
	}
	return o, count, err
}

// printJSON writes v to stdout as indented JSON: the --json output of the
// operator commands.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
