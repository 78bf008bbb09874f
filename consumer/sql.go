package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// SQLDB is what a Consumer made by NewSQL needs of Postgres: *sql.DB has
// it, and *sql.Conn for a Consumer that runs alone on it. Any database/sql
// driver for Postgres that takes $1 placeholders works (pgx's
// github.com/jackc/pgx/v5/stdlib, which the tests use, or lib/pq).
type SQLDB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// SQLHandler is Handler for database/sql: it handles one message inside
// tx, whose commit also records the event in processed_events. It must not
// commit or roll back tx.
type SQLHandler func(ctx context.Context, tx *sql.Tx, m *Message) error

// NewSQL is New for database/sql: the same Consumer, with the same
// guarantees, running h in transactions of db. Transaction options come
// from WithSQLTxOptions.
//
// database/sql rolls a transaction back by itself when the context it
// began with ends: a handler still running when WithDrainTimeout expires
// finds its transaction gone, as a pgx handler finds its context
// cancelled; either way nothing commits and the message is redelivered.
func NewSQL(db SQLDB, cons jetstream.Consumer, h SQLHandler, opts ...Option) (*Consumer, error) {
	if db == nil || cons == nil || h == nil {
		return nil, errors.New("consumer: NewSQL needs a database, a JetStream consumer and a handler")
	}
	return newConsumer(cons, opts, func(c *Consumer) (backend, error) {
		if c.txOptions != nil {
			return nil, errors.New("consumer: WithTxOptions is for New; NewSQL takes WithSQLTxOptions")
		}
		return sqlBackend{db: db, h: h, opts: c.sqlTxOptions}, nil
	})
}

// sqlBackend runs a Consumer's SQL through database/sql.
type sqlBackend struct {
	db   SQLDB
	h    SQLHandler
	opts *sql.TxOptions
}

func (b sqlBackend) begin(ctx context.Context) (txn, error) {
	tx, err := b.db.BeginTx(ctx, b.opts)
	if err != nil {
		return nil, err
	}
	return sqlTxn{tx: tx, h: b.h}, nil
}

func (b sqlBackend) exec(ctx context.Context, query string, args ...any) error {
	return b.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	})
}

func (b sqlBackend) tables(ctx context.Context, query string, args ...any) (tableFacts, error) {
	var f tableFacts
	err := b.inTx(ctx, &sql.TxOptions{ReadOnly: true}, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, query, args...).Scan(&f.hasProcessed, &f.hasFailed, &f.keysJSON)
	})
	return f, err
}

// inTx runs fn in a transaction of its own and commits it.
func (b sqlBackend) inTx(ctx context.Context, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// sqlTxn is one delivery's database/sql transaction.
type sqlTxn struct {
	tx *sql.Tx
	h  SQLHandler
}

func (t sqlTxn) claim(ctx context.Context, query string, args ...any) (bool, error) {
	var claimed bool
	err := t.tx.QueryRowContext(ctx, query, args...).Scan(&claimed)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t sqlTxn) handle(ctx context.Context, m *Message) error { return t.h(ctx, t.tx, m) }
func (t sqlTxn) commit(context.Context) error                 { return t.tx.Commit() }

// rollback is a no-op after commit (sql.ErrTxDone, ignored like pgx's).
func (t sqlTxn) rollback(context.Context) error { return t.tx.Rollback() }
