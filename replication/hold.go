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

// SessionStart is what a session knows once it holds the slot, before it
// reads from it.
type SessionStart struct {
	// Slot is the slot as this session holds it: its confirmed position is
	// where the server starts streaming.
	Slot SlotInfo
	// System is IDENTIFY_SYSTEM's answer on the session's own connection
	// (no second replication connection, so no second WAL sender, is
	// needed to learn the cluster and its timeline).
	System pglogrepl.IdentifySystemResult
	// TimelineHistory is the content of the current timeline's history
	// file (TIMELINE_HISTORY): the timelines it descends from and where
	// each ended. Empty on timeline 1, which has none.
	TimelineHistory []byte
}

// identify returns, on the replication connection before it streams, the
// server's identity: IDENTIFY_SYSTEM, and TIMELINE_HISTORY past timeline 1.
func identify(ctx context.Context, conn *pgconn.PgConn) (SessionStart, error) {
	system, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return SessionStart{}, fmt.Errorf("identify the Postgres system (IDENTIFY_SYSTEM): %w", err)
	}
	if system.Timeline <= 1 {
		return SessionStart{System: system}, nil
	}
	hist, err := pglogrepl.TimelineHistory(ctx, conn, system.Timeline)
	if err != nil {
		return SessionStart{}, fmt.Errorf("read the history of timeline %d (TIMELINE_HISTORY): %w", system.Timeline, err)
	}
	return SessionStart{System: system, TimelineHistory: hist.Content}, nil
}

// heldSlot reads the slot once this session's walsender holds it. From
// then on no one else can confirm past its position or stream from it, so
// what the relay learns next (what the stream holds beyond that position)
// cannot go stale before the session starts. A standby that looked before
// it held the slot would miss what the previous holder published in
// between, and publish it again.
func (s *Stream) heldSlot(ctx context.Context, walsender int32) (SlotInfo, error) {
	info, err := LookupSlot(ctx, s.pool, s.cfg.Slot)
	if err != nil {
		return SlotInfo{}, err
	}
	if !info.Exists {
		return SlotInfo{}, gap(fmt.Errorf("replication slot %q does not exist", s.cfg.Slot),
			"it was dropped while the relay started streaming from it")
	}
	if info.ActivePID != walsender {
		return SlotInfo{}, fmt.Errorf("replication slot %q: started streaming, but the slot is held by process %d, not by this session's walsender %d",
			s.cfg.Slot, info.ActivePID, walsender)
	}
	return info, CheckSlot(info, s.cfg.Slot, s.cfg.Repl.Database)
}

// holdWhile runs fn while the session holds the slot without reading from
// it: the walsender's output waits in the socket. A status update at the
// slot's own position (which confirms nothing new) goes out at once and
// then every interval (at most every second), so that the walsender, which
// counts the time since it last heard from the relay, does not end the
// connection however long fn takes. A server shutting down waits for its
// walsenders, which wait for the relay: once Postgres no longer answers a
// regular connection, fn is cancelled and the connection released.
func (s *Stream) holdWhile(ctx context.Context, conn *pgconn.PgConn, at pglogrepl.LSN, every time.Duration, fn func(context.Context) error) error {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(fctx) }()
	stop := func(err error) error {
		cancel()
		<-done
		return err
	}
	if err := sendPosition(ctx, conn, at, time.Now()); err != nil {
		return stop(err)
	}
	tick := time.NewTicker(min(every, probeEvery))
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case now := <-tick.C:
			if err := sendPosition(ctx, conn, at, now); err != nil {
				return stop(err)
			}
			if err := s.serverStopping(ctx); err != nil {
				return stop(err)
			}
		}
	}
}

// sendPosition sends a status update that confirms at.
func sendPosition(ctx context.Context, conn *pgconn.PgConn, at pglogrepl.LSN, now time.Time) error {
	err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: at, WALFlushPosition: at, WALApplyPosition: at, ClientTime: now,
	})
	if err != nil {
		return fmt.Errorf("send standby status update while preparing the session: %w", err)
	}
	return nil
}
