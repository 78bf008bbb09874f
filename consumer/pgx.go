package consumer

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
)

// DB is what a Consumer made by New needs of Postgres. *pgxpool.Pool and
// *pgx.Conn have it (a *pgx.Conn only for a Consumer that runs alone on
// it).
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Handler handles one message inside tx. Returning nil commits tx together
// with the event's processed_events row; returning an error rolls it back
// and the message is retried later (or, wrapped with Permanent, recorded
// and terminated at once). The handler must not commit or roll back tx.
type Handler func(ctx context.Context, tx pgx.Tx, m *Message) error

// New returns a Consumer that runs h for the messages of cons, a durable
// pull consumer with explicit acks and no MaxDeliver (see the package
// Traps), in pgx transactions of db. NewSQL is the same for database/sql.
func New(db DB, cons jetstream.Consumer, h Handler, opts ...Option) (*Consumer, error) {
	if db == nil || cons == nil || h == nil {
		return nil, errors.New("consumer: New needs a database, a JetStream consumer and a handler")
	}
	return newConsumer(cons, opts, func(c *Consumer) (backend, error) {
		if c.sqlTxOptions != nil {
			return nil, errors.New("consumer: WithSQLTxOptions is for NewSQL; New takes WithTxOptions")
		}
		b := pgxBackend{db: db, h: h}
		if c.txOptions != nil {
			b.opts = *c.txOptions
		}
		return b, nil
	})
}

// pgxBackend runs a Consumer's SQL through pgx.
type pgxBackend struct {
	db   DB
	h    Handler
	opts pgx.TxOptions
}

func (b pgxBackend) begin(ctx context.Context) (txn, error) {
	tx, err := b.db.BeginTx(ctx, b.opts)
	if err != nil {
		return nil, err
	}
	return pgxTxn{tx: tx, h: b.h}, nil
}

func (b pgxBackend) exec(ctx context.Context, sql string, args ...any) error {
	return pgx.BeginTxFunc(ctx, b.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, sql, args...)
		return err
	})
}

func (b pgxBackend) tables(ctx context.Context, sql string, args ...any) (tableFacts, error) {
	var f tableFacts
	err := pgx.BeginTxFunc(ctx, b.db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, sql, args...).Scan(&f.hasProcessed, &f.hasFailed, &f.keysJSON)
	})
	return f, err
}

// pgxTxn is one delivery's pgx transaction.
type pgxTxn struct {
	tx pgx.Tx
	h  Handler
}

func (t pgxTxn) claim(ctx context.Context, sql string, args ...any) (bool, error) {
	var claimed bool
	err := t.tx.QueryRow(ctx, sql, args...).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t pgxTxn) handle(ctx context.Context, m *Message) error { return t.h(ctx, t.tx, m) }
func (t pgxTxn) commit(ctx context.Context) error             { return t.tx.Commit(ctx) }
func (t pgxTxn) rollback(ctx context.Context) error           { return t.tx.Rollback(ctx) }
