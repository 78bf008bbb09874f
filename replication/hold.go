package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// statusEvery returns the longest a session goes without a status update:
// the configured interval, but at most half the server's
// wal_sender_timeout. The walsender ends a connection it has not heard from
// for wal_sender_timeout, and its own requests for a reply can sit unread
// behind megabytes of a large transaction while the relay works through
// them; an update sent on the relay's own clock does not depend on reading
// them in time.
func statusEvery(configured, senderTimeout time.Duration) time.Duration {
	if senderTimeout > 0 && configured > senderTimeout/2 {
		return senderTimeout / 2
	}
	return configured
}

// heldSlot reads the slot once this connection holds it. From then on no
// one else can confirm past its position or stream from it, so what the
// relay learns next (what the stream holds beyond that position) cannot
// go stale before the session starts. A standby that looked before it held
// the slot would miss what the previous holder published in between, and
// publish it again.
func (s *Stream) heldSlot(ctx context.Context, conn *pgconn.PgConn) (SlotInfo, error) {
	info, err := LookupSlot(ctx, s.pool, s.cfg.Slot)
	if err != nil {
		return SlotInfo{}, err
	}
	if !info.Exists {
		return SlotInfo{}, gap(fmt.Errorf("replication slot %q does not exist", s.cfg.Slot),
			"it was dropped while the relay started streaming from it")
	}
	if info.ActivePID != int32(conn.PID()) {
		return SlotInfo{}, fmt.Errorf("replication slot %q: started streaming, but the slot is held by process %d, not by this connection's %d",
			s.cfg.Slot, info.ActivePID, conn.PID())
	}
	return info, CheckSlot(info, s.cfg.Slot, s.cfg.Repl.Database)
}

// holdWhile runs fn while the session holds the slot without reading from
// it: the walsender's output waits in the socket. Status updates at the
// slot's own position (which confirm nothing new) go out every interval,
// so that the walsender, which counts the time since it last heard from
// the relay, does not end the connection however long fn takes.
func holdWhile(ctx context.Context, conn *pgconn.PgConn, at pglogrepl.LSN, every time.Duration, fn func(context.Context) error) error {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(fctx) }()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case now := <-tick.C:
			err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: at, WALFlushPosition: at, WALApplyPosition: at, ClientTime: now,
			})
			if err != nil {
				cancel()
				<-done
				return fmt.Errorf("send standby status update while preparing the session: %w", err)
			}
		}
	}
}
