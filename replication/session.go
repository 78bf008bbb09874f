package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outbox-relay/outbox-relay/decode"
)

// confirmGap is the shortest time between two status updates that only
// report progress. Keepalive replies are never delayed.
const confirmGap = 200 * time.Millisecond

// probeEvery is how often a stream that cannot confirm what the server
// waits for (the Handler is full, NATS is down, or the checkpoint write
// that must come first is refused by the shutdown itself) checks that
// Postgres is still up, so that a server shutting down is not held back.
const probeEvery = time.Second

// askAfter is the longest the connection stays silent before the relay
// asks Postgres for a reply (a status update with ReplyRequested): an idle
// walsender answers at once.
const askAfter = 10 * time.Second

// minSilenceMargin is the least the relay adds to the server's
// wal_sender_timeout before it presumes a silent connection dead (see
// silenceLimits): room for the network and a busy server.
const minSilenceMargin = 2 * time.Second

// finalConfirmTimeout bounds the final confirmation at shutdown, after the
// drain: the Handler's last check and record (Postgres round trips) and the
// last status update. A Postgres that does not answer in time (a
// partition, an overloaded server) must not hold the relay's exit for
// minutes; the position not confirmed is only replayed on the next start,
// where the events already stored are skipped.
const finalConfirmTimeout = 5 * time.Second

// silenceLimits returns, for the server's wal_sender_timeout, how long the
// replication connection may stay silent before the relay asks for a reply
// (ask) and before it presumes the connection dead (dead; 0 for never).
//
// The walsender is the authority on a replication connection's health: it
// closes the connection itself when it has not heard from the relay for
// wal_sender_timeout. Its own silence is no proof of death. While it
// decodes a large transaction that yields nothing for the relay (a backfill
// of a table outside the publication), it reads the relay's messages and
// sends keepalives only every wal_sender_timeout/2. So the relay asks early
// but gives up only after wal_sender_timeout plus a margin: a reply to its
// request is due by then even mid-transaction, and the margin (half of
// wal_sender_timeout, at least minSilenceMargin) covers one late round of
// the walsender's. Giving up sooner drops the connection in the middle of
// that transaction; the next one replays it from the start and is dropped
// again, forever, while WAL piles up.
//
// wal_sender_timeout = 0 turns the server's timeout off: no walsender gives
// up on a silent relay and none sends pings, so silence proves nothing and
// the relay never presumes death by it (it still asks for replies). A dead
// peer is then found by TCP alone. pgconn dials with Go's default
// keepalive (first probe after 15 s idle, then every 15 s, 9 probes: about
// 2.5 minutes), which only runs while nothing the relay sent is
// unacknowledged; as the relay sends a status update at least every
// StatusInterval, on a cut path the kernel's retransmission timeout usually
// decides (net.ipv4.tcp_retries2: about 15 minutes by default).
func silenceLimits(walSenderTimeout time.Duration) (ask, dead time.Duration) {
	if walSenderTimeout <= 0 {
		return askAfter, 0
	}
	return min(askAfter, walSenderTimeout/2), walSenderTimeout + max(walSenderTimeout/2, minSilenceMargin)
}

// errRelease ends a session on purpose: Postgres is shutting down while the
// relay cannot confirm all it was sent, and the walsender would wait for
// that confirmation forever.
var errRelease = errors.New("released the replication connection")

// session is one replication connection: the receive loop and the status
// updates on it. Only its own goroutine touches it.
type session struct {
	*Stream
	conn       *pgconn.PgConn
	h          Handler
	dec        *decode.Decoder
	sent       pglogrepl.LSN // flush position in the last status update
	lastStatus time.Time
	wakeAt     time.Time
	lastRecv   time.Time     // when the server last sent anything
	askedAt    time.Time     // when a reply was requested for the current silence
	lastProbe  time.Time     // when Postgres was last checked for a shutdown
	askAfter   time.Duration // silence before asking for a reply
	deadAfter  time.Duration // silence before giving up; 0: never (see silenceLimits)
	// senderTimeout is the server's wal_sender_timeout for this connection.
	senderTimeout time.Duration
	statusEvery   time.Duration // longest time between status updates (see statusEvery)
	serverEnd     pglogrepl.LSN // WAL end in the server's last keepalive
	ignored       map[string]bool
	co            *coalescer // reads in batches while a backlog drains
	// committed is set at the session's first COMMIT: coalescing waits for
	// it, so that the first event is read (and published) at once rather
	// than after a batch or a linger, however far behind the session starts.
	committed bool
	// firstWAL ends the start-up phase that waits for the first WAL data
	// (the walsender decoding from the slot's restart point); nil after.
	firstWAL     func()
	readDeadline time.Time // the read deadline set last
}

func (s *session) run(ctx context.Context) error {
	netConn := s.conn.Conn()
	// Cancelling ctx interrupts a blocked receive through its deadline:
	// no per-message context watching.
	stop := context.AfterFunc(ctx, func() { _ = netConn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	s.lastRecv = time.Now()
	s.co = newCoalescer(netConn)
	// now is when the latest receive returned, or when offer ended a wait
	// for room (it moves lastRecv): one clock read per message serves the
	// status update's check, the read deadline and the silence watch (in a
	// drain, three reads per message were 5-8% of the relay's CPU). A
	// message's handling takes microseconds; their intervals are
	// milliseconds and more. A deadline computed from a clock read that
	// went stale in a long step (a shutdown probe) is in the past: the read
	// times out at once and the loop reads the clock again.
	now := s.lastRecv
	for {
		if ctx.Err() != nil {
			return s.finish()
		}
		if err := s.tickAt(ctx, now, false); err != nil {
			return err
		}
		s.armRead(ctx, now)
		msg, err := s.conn.ReceiveMessage(context.Background())
		now = time.Now()
		if err != nil {
			if pgconn.Timeout(err) || isTimeout(err) {
				if err := s.checkAlive(now); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("receive from slot %q: %w", s.cfg.Slot, err)
		}
		s.lastRecv, s.askedAt = now, time.Time{}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			err := s.handle(ctx, msg.Data)
			now = s.lastRecv
			if err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream (shutting down?)")
		}
	}
}

// checkAlive notices a connection that went silent without being closed
// (a network cut that sends no reset): after askAfter it asks the server
// for a reply, and after deadAfter without any message it gives up on the
// connection (see silenceLimits).
func (s *session) checkAlive(now time.Time) error {
	silent := now.Sub(s.lastRecv)
	switch {
	case silent < s.askAfter:
		return nil
	case s.askedAt.IsZero():
		s.askedAt = now
		return s.sendStatusRequest(now)
	case s.deadAfter > 0 && silent >= s.deadAfter:
		return fmt.Errorf("no message from Postgres for %s, not even after asking for one (the walsender answers within wal_sender_timeout, %s): presuming the connection dead",
			silent.Round(time.Second), s.senderTimeout)
	}
	return nil
}

// armRead sets the read deadline for the next receive: the next status
// update, or sooner the end of a coalescing wait or of the live mark's
// linger.
func (s *session) armRead(ctx context.Context, now time.Time) {
	at := s.wakeAt
	switch {
	case s.co.on:
		at = s.co.deadline(now, s.wakeAt)
	case s.co.live:
		at = s.co.liveDeadline(now, s.lastRecv, s.wakeAt, s.readDeadline)
	}
	if at.Equal(s.readDeadline) || ctx.Err() != nil {
		return
	}
	s.readDeadline = at
	_ = s.conn.Conn().SetReadDeadline(at)
}

// coalesced logs a switch of the coalescing of reads.
func (s *session) coalesced(switched bool, lsn pglogrepl.LSN) {
	if switched {
		s.log.Debug().Bool("coalescing", s.co.on).Int("low_water_bytes", s.co.lowat).Str("lsn", lsn.String()).Msg("reading the replication stream in batches: on while far behind")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// handle processes one CopyData message: a keepalive or a chunk of WAL.
func (s *session) handle(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return errors.New("empty CopyData message from the server")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		if !s.dec.InTransaction() {
			s.h.Idle(ka.ServerWALEnd)
		}
		s.serverEnd = ka.ServerWALEnd
		// The walsender waits for WAL, or for the relay: no backlog here.
		s.coalesced(s.co.off(), ka.ServerWALEnd)
		return s.tick(ctx, ka.ReplyRequested)
	case pglogrepl.XLogDataByteID:
		if s.firstWAL != nil {
			s.firstWAL()
			s.firstWAL = nil
		}
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData: %w", err)
		}
		return s.apply(ctx, xld)
	default:
		return fmt.Errorf("unexpected replication message %q", data[0])
	}
}

// apply decodes one pgoutput message and passes it on.
func (s *session) apply(ctx context.Context, xld pglogrepl.XLogData) error {
	m, err := s.dec.Decode(xld.WALData)
	if err != nil {
		return fatal(fmt.Errorf("at WAL %s: %w", xld.WALStart, err),
			"the relay stops rather than skip a change it cannot read; check the outbox table's definition")
	}
	switch m.Kind {
	case decode.KindBegin:
		if s.committed {
			s.coalesced(s.co.commitLag(xld.ServerTime.Sub(m.CommitTime)), xld.WALStart)
		}
	case decode.KindEvent:
		s.metrics.Events.Inc()
		return s.offer(ctx, &m.Event)
	case decode.KindCommit:
		if !s.committed && !s.cfg.HeldToCommit {
			s.co.goLive() // livemark.go
		}
		s.committed = true
		s.h.Commit(m.EndLSN)
	case decode.KindIgnored:
		s.metrics.Ignored.Inc()
		if !s.ignored[m.Ignored] {
			if s.ignored == nil {
				s.ignored = map[string]bool{}
			}
			s.ignored[m.Ignored] = true
			msg := "the relay publishes inserts only; ignoring this kind of change (create the publication WITH (publish = 'insert') to stop receiving it)"
			if m.Hint != "" {
				msg = m.Hint
			}
			s.log.Warn().Str("change", m.Ignored).Str("lsn", xld.WALStart.String()).Msg(msg)
		}
	}
	return nil
}

// offer hands ev to the Handler, waiting for room if needed. While it waits
// it keeps sending status updates, so Postgres does not time it out, and it
// watches for a server shutdown.
func (s *session) offer(ctx context.Context, ev *decode.Event) error {
	if s.h.Event(ev) {
		return nil
	}
	s.metrics.Blocked.Set(1)
	defer s.metrics.Blocked.Set(0)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	// Time spent not reading is not silence from the server.
	defer func() { s.lastRecv, s.askedAt = time.Now(), time.Time{} }()
	for {
		select {
		case <-ctx.Done():
			return s.finish()
		case <-s.h.Room():
			if s.h.Event(ev) {
				return nil
			}
		case <-tick.C:
			// Not reading means not seeing the server's keepalive requests:
			// report every second, so no wal_sender_timeout can expire.
			flushed, err := s.h.Flushed(ctx, false)
			if err != nil {
				return err
			}
			if err := s.sendStatus(flushed, time.Now()); err != nil {
				return err
			}
			if err := s.serverStopping(ctx); err != nil {
				return err
			}
		}
	}
}

// serverStopping checks, with a regular connection, whether Postgres is
// going away: during a shutdown it ends ordinary sessions first, then
// waits for its walsenders, which wait for our confirmation. It returns
// errRelease (with the cause) when the check fails for any reason but a
// lack of server resources, which says nothing about a shutdown.
func (s *Stream) serverStopping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := s.pool.Ping(pctx)
	var pgErr *pgconn.PgError
	switch {
	case err == nil || ctx.Err() != nil:
		return nil
	case errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "53"): // too many connections, out of memory
		s.log.Warn().Err(err).Msg("cannot check whether Postgres is shutting down")
		return nil
	}
	return fmt.Errorf("%w (Postgres did not answer a regular connection: %v)", errRelease, err)
}

// tick sends a status update when one is due, or at once when the server
// asked for a reply.
func (s *session) tick(ctx context.Context, replyRequested bool) error {
	return s.tickAt(ctx, time.Now(), replyRequested)
}

// tickAt is tick at now.
func (s *session) tickAt(ctx context.Context, now time.Time, replyRequested bool) error {
	if !replyRequested && now.Before(s.wakeAt) {
		return nil
	}
	flushed, err := s.h.Flushed(ctx, false)
	if err != nil {
		return err
	}
	due := replyRequested || now.Sub(s.lastStatus) >= s.statusEvery ||
		(flushed > s.sent && now.Sub(s.lastStatus) >= confirmGap)
	if due {
		if err := s.sendStatus(flushed, now); err != nil {
			return err
		}
	}
	s.wakeAt = now.Add(min(confirmGap, s.statusEvery))
	// A walsender that is shutting down asks for a reply, again and again,
	// until the client has confirmed everything it sent. Whatever keeps the
	// relay from confirming (NATS down, the checkpoint tables refusing
	// writes during the shutdown), that request is the one sign to watch.
	waiting := replyRequested && flushed < s.serverEnd
	if waiting && now.Sub(s.lastProbe) >= probeEvery {
		s.lastProbe = now
		if err := s.serverStopping(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (s *session) sendStatus(flushed pglogrepl.LSN, now time.Time) error {
	return s.status(flushed, now, false)
}

// sendStatusRequest sends a status update that asks the server to answer.
func (s *session) sendStatusRequest(now time.Time) error {
	return s.status(s.sent, now, true)
}

func (s *session) status(flushed pglogrepl.LSN, now time.Time, replyRequested bool) error {
	if flushed < s.sent {
		flushed = s.sent // never move the slot backwards
	}
	// Write, flush and apply positions are all set explicitly: pglogrepl
	// would otherwise copy the write position into an empty flush field.
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: flushed,
		WALFlushPosition: flushed,
		WALApplyPosition: flushed,
		ClientTime:       now,
		ReplyRequested:   replyRequested,
	})
	if err != nil {
		return fmt.Errorf("send standby status update: %w", err)
	}
	s.sent, s.lastStatus = flushed, now
	s.metrics.ConfirmedLSN.Set(float64(flushed))
	return nil
}

// finish ends a session at shutdown: wait up to DrainTimeout for in-flight
// publishes, keeping the connection alive meanwhile, then confirm what was
// acknowledged within finalConfirmTimeout more. Nothing here waits on
// Postgres without a deadline: a partitioned server costs the shutdown
// DrainTimeout + finalConfirmTimeout, not the minutes TCP takes to give up.
func (s *session) finish() error {
	netConn := s.conn.Conn()
	// The walsender's answer to the final status update is a keepalive of
	// a few bytes: it must wake the read at once, not at the deadline.
	s.co.stop()
	deadline := time.Now().Add(s.cfg.DrainTimeout)
	// A status update must not block on a full socket (a server that
	// stopped reading) past the drain.
	_ = netConn.SetWriteDeadline(deadline)
	bg := context.Background()
	var err error
	for {
		stepEnd := time.Now().Add(confirmGap)
		if deadline.Before(stepEnd) {
			stepEnd = deadline
		}
		step, cancel := context.WithDeadline(bg, stepEnd)
		err = s.h.Drain(step)
		cancel()
		if err == nil || !time.Now().Before(deadline) {
			break
		}
		flushed, ferr := s.h.Flushed(bg, false)
		if ferr != nil {
			break
		}
		if serr := s.sendStatus(flushed, time.Now()); serr != nil {
			break
		}
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("shutdown before every publish was acknowledged: those events are published again on restart")
	}
	end := time.Now().Add(finalConfirmTimeout)
	_ = netConn.SetWriteDeadline(end) // also bounds the Terminate sent when the connection closes
	// The Handler's round trips get most of it; the rest is for sending
	// what it allowed and hearing the answer.
	fctx, cancel := context.WithDeadline(bg, end.Add(-finalConfirmTimeout/5))
	defer cancel()
	flushed, ferr := s.h.Flushed(fctx, true)
	if ferr != nil {
		s.log.Warn().Err(ferr).Msg("final confirmation withheld")
		flushed = s.sent
	}
	// Ask for a reply: the walsender answers once it has read the update,
	// and only then is the position known to be confirmed.
	if serr := s.status(flushed, time.Now(), true); serr != nil {
		s.log.Warn().Err(serr).Str("lsn", s.sent.String()).
			Msg("the final position was not confirmed (the status update failed): on restart the relay replays from the slot's previous position and skips the events the stream holds")
		return nil
	}
	if rerr := s.awaitReply(end); rerr != nil {
		s.log.Warn().Err(rerr).Str("lsn", s.sent.String()).
			Msg("the final position was not confirmed (Postgres did not answer in time): on restart the relay replays from the slot's previous position and skips the events the stream holds")
		return nil
	}
	s.log.Info().Str("lsn", s.sent.String()).Msg("drained; confirmed the final position to Postgres")
	if s.cfg.Stopped != nil {
		// What is left of the final confirmation's time, a second at least.
		sctx, cancel := context.WithDeadline(bg, later(end, time.Now().Add(time.Second)))
		defer cancel()
		s.cfg.Stopped(sctx, s.sent)
	}
	return nil
}

// awaitReply waits until end for the walsender's answer to a status update
// that asked for one: a keepalive that does not itself ask for a reply.
// WAL that arrives meanwhile is dropped; it is replayed on the next start.
func (s *session) awaitReply(end time.Time) error {
	for {
		// Set on every round: run's context watcher may move the read
		// deadline into the past once, just after this session began to
		// finish.
		_ = s.conn.Conn().SetReadDeadline(end)
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if (pgconn.Timeout(err) || isTimeout(err)) && time.Now().Before(end) {
				continue
			}
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if len(msg.Data) > 0 && msg.Data[0] == pglogrepl.PrimaryKeepaliveMessageByteID {
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err == nil && !ka.ReplyRequested {
					return nil
				}
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream")
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
