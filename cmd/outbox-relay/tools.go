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

// reader reads the stream back as the table's (see identity).
func (t *tools) reader(ctx context.Context, n names, log zerolog.Logger) *jssink.Reader {
	return t.stream.Reader(sink.NewStamp(identity(ctx, t.pool, n, log)))
}

// identity is what the table's messages name as their source (its
// Postgres system, database and table, and the relay's slot for messages
// of older relays): operator commands read a shared stream back through
// it, leaving other tables', databases' and clusters' messages out. For a
// relay of several tables it names them all (sink.Source.Tables), so each
// table's messages count, and only theirs. A role
// that may not read pg_control_system() gets the zero source, which takes
// every relay's messages for the table's, and a warning.
func identity(ctx context.Context, pool *pgxpool.Pool, n names, log zerolog.Logger) sink.Source {
	system, database, err := replication.Identify(ctx, pool)
	if err != nil {
		log.Warn().Err(err).Msg("reading every relay's messages in the stream as this table's: a stream shared with other tables, databases or clusters shows theirs too")
		return sink.Source{}
	}
	return sink.Source{System: system, Database: database, Table: contract.JoinTables(n.tables()), Slot: n.slot}
}

// republish publishes the rows with the given ids from the table.
func (t *tools) republish(ctx context.Context, n names, ids []string, log zerolog.Logger) error {
	_, count, err := t.publishIDs(ctx, n, ids, contract.ReplayRepublish, log, nil)
	if err != nil {
		return err
	}
	log.Info().Int("published", count).Msg("republished the missing rows")
	return nil
}

// publishIDs publishes the rows with the given keys (ids, qualified by
// their table when the relay reads several: see relay.RowSource.EachKey),
// in commit order, marked with replay (contract.HeaderReplay), and waits
// for their PubAcks. admit, when set, sees every row found, with the
// publisher, and may hold it back. It returns the publisher (to ask what
// was dead-lettered) and how many rows were found.
func (t *tools) publishIDs(ctx context.Context, n names, ids []string, replay string, log zerolog.Logger, admit func(*relay.OneShot, *decode.Event) bool) (*relay.OneShot, int, error) {
	src, err := relay.NewRowSource(ctx, t.pool, n.table, n.more...)
	if err != nil {
		return nil, 0, err
	}
	cfg := n.relayConfig()
	cfg.PGURL = t.pgURL
	o, err := relay.NewOneShot(ctx, t.stream, cfg, t.store, replay, log)
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
