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

// silenceLimit is how long the connection may stay silent before the relay
// asks Postgres for a reply, and then how long it waits for one before it
// presumes the connection dead (a network cut that sends no reset).
const silenceLimit = 10 * time.Second

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
	serverEnd  pglogrepl.LSN // WAL end in the server's last keepalive
	ignored    map[string]bool
}

func (s *session) run(ctx context.Context) error {
	netConn := s.conn.Conn()
	// Cancelling ctx interrupts a blocked receive through its deadline:
	// no per-message context watching.
	stop := context.AfterFunc(ctx, func() { _ = netConn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	s.lastRecv = time.Now()
	for {
		if ctx.Err() != nil {
			return s.finish()
		}
		if err := s.tick(ctx, false); err != nil {
			return err
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) || isTimeout(err) {
				if err := s.checkAlive(time.Now()); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("receive from slot %q: %w", s.cfg.Slot, err)
		}
		s.lastRecv, s.askedAt = time.Now(), time.Time{}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.handle(ctx, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream (shutting down?)")
		}
	}
}

// checkAlive notices a connection that went silent without being closed:
// after silenceLimit it asks the server for a reply, and after as long
// again without one it gives up on the connection.
func (s *session) checkAlive(now time.Time) error {
	switch {
	case now.Sub(s.lastRecv) < silenceLimit:
		return nil
	case s.askedAt.IsZero():
		s.askedAt = now
		return s.sendStatusRequest(now)
	case now.Sub(s.askedAt) >= silenceLimit:
		return fmt.Errorf("no message from Postgres for %s, not even after asking for one: presuming the connection dead", now.Sub(s.lastRecv).Round(time.Second))
	}
	return nil
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
		return s.tick(ctx, ka.ReplyRequested)
	case pglogrepl.XLogDataByteID:
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
	case decode.KindEvent:
		s.metrics.Events.Inc()
		return s.offer(ctx, &m.Event)
	case decode.KindCommit:
		s.h.Commit(m.EndLSN)
	case decode.KindIgnored:
		s.metrics.Ignored.Inc()
		if !s.ignored[m.Ignored] {
			if s.ignored == nil {
				s.ignored = map[string]bool{}
			}
			s.ignored[m.Ignored] = true
			s.log.Warn().Str("change", m.Ignored).Str("lsn", xld.WALStart.String()).
				Msg("the relay publishes inserts only; ignoring this kind of change (create the publication WITH (publish = 'insert') to stop receiving it)")
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
func (s *session) serverStopping(ctx context.Context) error {
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
	now := time.Now()
	if !replyRequested && now.Before(s.wakeAt) {
		return nil
	}
	flushed, err := s.h.Flushed(ctx, false)
	if err != nil {
		return err
	}
	due := replyRequested || now.Sub(s.lastStatus) >= s.cfg.StatusInterval ||
		(flushed > s.sent && now.Sub(s.lastStatus) >= confirmGap)
	if due {
		if err := s.sendStatus(flushed, now); err != nil {
			return err
		}
	}
	s.wakeAt = now.Add(min(confirmGap, s.cfg.StatusInterval))
	if ctx.Err() == nil {
		_ = s.conn.Conn().SetReadDeadline(s.wakeAt)
	}
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

// finish ends a session at shutdown: wait for in-flight publishes, keep
// the connection alive meanwhile, then confirm what was acknowledged.
func (s *session) finish() error {
	deadline := time.Now().Add(s.cfg.DrainTimeout)
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
	flushed, ferr := s.h.Flushed(bg, true)
	if ferr != nil {
		s.log.Warn().Err(ferr).Msg("final confirmation withheld")
		flushed = s.sent
	}
	if serr := s.sendStatus(flushed, time.Now()); serr != nil {
		s.log.Warn().Err(serr).Msg("final status update failed; the slot keeps its previous position")
		return nil
	}
	s.log.Info().Str("lsn", flushed.String()).Msg("drained; confirmed the final position to Postgres")
	return nil
}
