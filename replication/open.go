package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// Opened is a replication connection opened and asked who it is (its
// walsender's process id, its wal_sender_timeout, the server's identity
// and timeline history), not streaming yet. It does not hold the slot:
// that happens at START_REPLICATION, in the session, after which the slot
// is looked at again (heldSlot) before the tail of the stream is read.
// The relay opens one while it takes up the slot, so that its first
// session starts on a connection already there (Stream.UseFirst).
type Opened struct {
	conn          *pgconn.PgConn
	senderTimeout time.Duration
	walsender     int32
	start         SessionStart
}

// Open opens a replication connection with cfg and identifies it.
func Open(ctx context.Context, cfg *pgconn.Config) (*Opened, error) {
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open replication connection to %s: %w", Describe(cfg), err)
	}
	o := &Opened{conn: conn}
	if err := o.identify(ctx); err != nil {
		o.Close(ctx)
		return nil, err
	}
	return o, nil
}

// identify asks, in one round trip, for the walsender's process id and
// wal_sender_timeout, then runs IDENTIFY_SYSTEM (and TIMELINE_HISTORY
// past timeline 1).
func (o *Opened) identify(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var err error
	if o.walsender, o.senderTimeout, err = walsenderSettings(ctx, o.conn); err != nil {
		return err
	}
	o.start, err = identify(ctx, o.conn)
	return err
}

// System returns the server's identity as IDENTIFY_SYSTEM gave it.
func (o *Opened) System() pglogrepl.IdentifySystemResult { return o.start.System }

// Close closes the connection.
func (o *Opened) Close(ctx context.Context) {
	if o != nil {
		_ = o.conn.Close(context.WithoutCancel(ctx))
	}
}

// walsenderSettings reads, on the replication connection itself, the
// process id of its walsender (pg_backend_pid(): the id in
// pg_replication_slots.active_pid, also behind a pooler that reports its
// own in the protocol's BackendKeyData) and wal_sender_timeout (which can
// differ per role, database or connection: the walsender serving this
// connection is the one that applies it). current_setting prints it as
// SHOW does.
func walsenderSettings(ctx context.Context, conn *pgconn.PgConn) (int32, time.Duration, error) {
	res, err := conn.Exec(ctx, "SELECT pg_backend_pid(), current_setting('wal_sender_timeout')").ReadAll()
	if err != nil {
		return 0, 0, fmt.Errorf("read the walsender's process id and wal_sender_timeout on the replication connection: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 2 {
		return 0, 0, errors.New("read the walsender's process id and wal_sender_timeout on the replication connection: unexpected answer")
	}
	row := res[0].Rows[0]
	pid, err := strconv.ParseInt(string(row[0]), 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("read the walsender's process id: %w", err)
	}
	timeout, err := parseMillis(string(row[1]))
	if err != nil {
		return 0, 0, fmt.Errorf("read wal_sender_timeout on the replication connection: %w", err)
	}
	return int32(pid), timeout, nil
}
