package main

import (
	"context"
	"encoding/json"
	"os"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
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
	return core.PingPool(ctx, poolCfg)
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

// reader reads the stream back as the table's (see identity).
func (t *tools) reader(ctx context.Context, n names, log zerolog.Logger) *jssink.Reader {
	return t.stream.Reader(sink.NewStamp(identity(ctx, t.pool, n, log)))
}

// identity is the source of the table's messages (relay.TableSource):
// operator commands read a shared stream back through it, leaving other
// tables', databases' and clusters' messages out. A role that may not
// read pg_control_system() gets the zero source, which takes every
// relay's messages for the table's, and a warning.
func identity(ctx context.Context, pool *pgxpool.Pool, n names, log zerolog.Logger) sink.Source {
	src, err := relay.TableSource(ctx, pool, n.relayConfig())
	if err != nil {
		log.Warn().Err(err).Msg("reading every relay's messages in the stream as this table's: a stream shared with other tables, databases or clusters shows theirs too")
	}
	return src
}

// deps are the connections as the relay package takes them.
func (t *tools) deps() relay.ReplayDeps {
	return relay.ReplayDeps{Pool: t.pool, NC: t.nc, Stream: t.stream, Store: t.store}
}

// config is the relay's configuration with these names, its messages
// naming t's Postgres as their source.
func (t *tools) config(n names) relay.Config {
	cfg := n.relayConfig()
	cfg.PGURL = t.pgURL
	return cfg
}

// republish publishes the rows with the given ids from the table.
func (t *tools) republish(ctx context.Context, n names, ids []string, log zerolog.Logger) error {
	count, err := relay.Republish(ctx, t.deps(), t.config(n), ids, log)
	if err != nil {
		return err
	}
	log.Info().Int("published", count).Msg("republished the missing rows")
	return nil
}

// printJSON writes v to stdout as indented JSON: the --json output of the
// operator commands.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
