package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// takeUpLock makes taking up a slot exclusive among relays on one
// database: deciding, creating the slot, publishing the rows present at
// its creation and recording that, or repairing. Without it a second
// instance starting while the first publishes a large backlog (its slot
// inactive, its record unfinished) would decide to start over, drop the
// first one's slot and leave rows committed in between to nobody.
//
// It is a session-level advisory lock on a connection of its own, taken
// out of the pool: the lock is released when that connection closes,
// including when the process is killed.
type takeUpLock struct {
	conn *pgx.Conn
}

// lockKey is the advisory lock's key text for slot; slot names are
// cluster-wide, and so are the keys (per database, which is enough: a
// slot belongs to one database).
func lockKey(slot string) string { return "outbox-relay take-up " + slot }

// takeUpConn takes a connection out of pool for the take-up lock of slot.
func takeUpConn(ctx context.Context, pool *pgxpool.Pool, slot string) (*pgx.Conn, error) {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect for the take-up lock of slot %q: %w", slot, err)
	}
	return pc.Hijack(), nil
}

// closeConn closes a connection taken out of the pool.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// lockTakeUp waits, on conn (which it then owns), for the take-up lock
// of slot; when another instance holds it, beforeWait decides first
// whether to wait at all.
func lockTakeUp(ctx context.Context, conn *pgx.Conn, slot string, beforeWait func() error, log zerolog.Logger) (*takeUpLock, error) {
	l := &takeUpLock{conn: conn}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, lockKey(slot)).Scan(&got); err != nil {
		l.release()
		return nil, fmt.Errorf("take the take-up lock of slot %q: %w", slot, err)
	}
	if got {
		return l, nil
	}
	if err := beforeWait(); err != nil {
		l.release()
		return nil, err
	}
	log.Info().Str("slot", slot).Msg("another relay instance is taking up the slot (creating it, publishing the rows present at its creation, or repairing); waiting for it")
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, lockKey(slot)); err != nil {
		l.release()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("wait for the take-up lock of slot %q: %w", slot, err)
	}
	return l, nil
}

// held checks that the lock's connection is still up: a connection lost
// mid-way released the lock, and another instance may have started over.
func (l *takeUpLock) held(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l.conn.Ping(ctx); err != nil {
		return errors.Join(errLockLost, err)
	}
	return nil
}

var errLockLost = errors.New("lost the connection that held the take-up lock; another instance may have taken over")

// release closes the connection, which releases the lock.
func (l *takeUpLock) release() { closeConn(l.conn) }
