package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/internal/startup"
)

// Handler receives what the stream decodes, in WAL order, on the goroutine
// that owns the replication connection. Its methods must not block, except
// Drain.
type Handler interface {
	// Event hands over one outbox event. It returns false when there is no
	// room: the stream then waits on Room, keeps Postgres informed, and
	// offers the same event again.
	Event(ev *decode.Event) bool
	Room() <-chan struct{}
	// Commit says every event of the transaction ending at end was handed
	// over.
	Commit(end pglogrepl.LSN)
	// Idle reports a keepalive's WAL end received outside any transaction.
	Idle(walEnd pglogrepl.LSN)
	// Flushed returns the LSN that is safe to confirm to Postgres now;
	// final is set for the last status update before the relay stops. An
	// error ends the session (a contract.FatalError stops the relay).
	Flushed(ctx context.Context, final bool) (pglogrepl.LSN, error)
	// Drain waits until everything handed over is acknowledged.
	Drain(ctx context.Context) error
}

// Defaults of the Config durations left zero.
const (
	DefaultStatusInterval = 10 * time.Second
	DefaultDrainTimeout   = 10 * time.Second
)

// Config configures a Stream.
type Config struct {
	// Repl configures the replication connection (see ParseConnString).
	Repl *pgconn.Config
	// Slot and Publication are required (the relay's defaults are
	// contract.DefaultSlot and contract.DefaultPublication): the slot's
	// name is also the key of the relay's record of it.
	Slot        string
	Publication string
	Table       contract.Table
	// MoreTables are further outbox tables decoded in the same pass over
	// the WAL (see decode.WithTables).
	MoreTables []contract.Table
	// MessagePrefix, when set, makes transactional logical messages with
	// this prefix events too (table-less events, Postgres 14+).
	MessagePrefix string
	// StatusInterval is the longest time between standby status updates
	// (DefaultStatusInterval when zero), capped at half the server's
	// wal_sender_timeout. Progress is confirmed sooner, up to five times a
	// second.
	StatusInterval time.Duration
	// Failover makes the slot a failover slot (Postgres 17+) before each
	// session, when it is not one yet (see SlotOptions.Failover).
	Failover bool
	// HeldToCommit says the sink holds each transaction's events until its
	// COMMIT (atomic batches of whole transactions): the COMMIT is then
	// read as it arrives, never left under the live mark (livemark.go),
	// which would hold the events with it for up to its linger.
	HeldToCommit bool
	// DrainTimeout bounds how long shutdown waits for in-flight publishes
	// before the final status update (DefaultDrainTimeout when zero).
	DrainTimeout time.Duration
	// BeforeSession, when set, runs at the start of each session, once the
	// session holds the slot and before it reads from it, with the slot as
	// it is then and the server's identity: the relay checks the slot is
	// still its own (not dropped and recreated, same cluster) and learns
	// what of the replay the stream already holds. Postgres is kept
	// informed meanwhile, however long it takes; a server shutting down
	// cancels it.
	BeforeSession func(ctx context.Context, start SessionStart) error
	// Stopped, when set, runs at a clean stop, once Postgres confirmed the
	// final position (confirmed) and before the connection closes: the
	// session still holds the slot, so no one else has confirmed past it.
	// The relay records that position exactly (checkpoint.Record.Stopped).
	// ctx ends with the final confirmation's time.
	Stopped func(ctx context.Context, confirmed pglogrepl.LSN)
}

func (c *Config) setDefaults() {
	if c.StatusInterval <= 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
}

// Stream streams an outbox table's inserts from a replication slot.
type Stream struct {
	cfg       Config
	pool      *pgxpool.Pool
	log       zerolog.Logger
	metrics   *Metrics
	streaming atomic.Bool
	// busyAt is when the latest session found the slot held by another
	// process (Unix nanoseconds); 0 when it ended otherwise.
	busyAt atomic.Int64
	// first is a connection opened ahead for the next session (UseFirst).
	first atomic.Pointer[Opened]
	// settled is closed once the first session streams or ends.
	settled     chan struct{}
	settledOnce sync.Once
}

// FirstSession is closed once the first session streams, or ended
// without streaming (a standby, an error): until then it has the pool to
// itself, which the relay's background readers leave it (a query of
// theirs meanwhile can cost the session a new connection).
func (s *Stream) FirstSession() <-chan struct{} { return s.settled }

func (s *Stream) settle() { s.settledOnce.Do(func() { close(s.settled) }) }

// UseFirst gives the stream a replication connection opened ahead of its
// first session, which then starts on it instead of dialing (the stream
// closes it). It must be younger than the server's idle limits: the relay
// hands one over only after a quick take-up.
func (s *Stream) UseFirst(o *Opened) {
	if old := s.first.Swap(o); old != nil {
		old.Close(context.Background())
	}
}

// NewStream returns a Stream. pool is a regular connection pool to the same
// database, used to look at the slot and to notice a server shutdown.
func NewStream(cfg Config, pool *pgxpool.Pool, log zerolog.Logger, metrics *Metrics) (*Stream, error) {
	cfg.setDefaults()
	if err := CheckName("slot", cfg.Slot); err != nil {
		return nil, err
	}
	if err := CheckName("publication", cfg.Publication); err != nil {
		return nil, err
	}
	return &Stream{cfg: cfg, pool: pool, log: log, metrics: metrics, settled: make(chan struct{})}, nil
}

// Streaming reports whether a replication session is streaming now.
func (s *Stream) Streaming() bool { return s.streaming.Load() }

// standbyFresh is how recent the latest "slot busy" answer must be for
// Standby: sessions are retried at most 2 s apart while the slot is busy,
// so an older answer means the retry itself is stuck (Postgres
// unreachable).
const standbyFresh = 10 * time.Second

// Standby reports whether this stream waits as a healthy standby: the
// latest session found the slot held by another process, and Postgres
// said so within the last few seconds.
func (s *Stream) Standby() bool {
	at := s.busyAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < standbyFresh
}

// noteSession records how a session ended, for Standby.
func (s *Stream) noteSession(err error) {
	if errors.Is(err, errSlotBusy) {
		s.busyAt.Store(time.Now().UnixNano())
	} else {
		s.busyAt.Store(0)
	}
}

// Run streams until ctx ends or a contract.FatalError occurs. Transient failures
// (a lost connection, a restarting server, the slot busy with another
// relay) are retried with capped exponential backoff. When ctx ends, Run
// drains the Handler, sends a final status update and returns nil.
func (s *Stream) Run(ctx context.Context, h Handler) error {
	bo := retry.NewBackoff(100*time.Millisecond, 10*time.Second)
	logs := retry.NewLogLimiter()
	for {
		started := time.Now()
		err := s.classify(s.session(ctx, h))
		s.settle()
		// The start-up ends with the first session at the latest: the
		// trace records no retries (a standby instance retries every few
		// seconds for as long as it waits).
		startup.FromContext(ctx).Finish("the first replication session ended")
		s.streaming.Store(false)
		s.noteSession(err)
		s.metrics.Connected.Set(0)
		if ctx.Err() != nil {
			return nil
		}
		var fe *contract.FatalError
		if errors.As(err, &fe) {
			return err
		}
		if time.Since(started) > time.Minute {
			bo.Reset()
		}
		wait := bo.Next()
		switch {
		case errors.Is(err, errSlotBusy):
			wait = min(wait, 2*time.Second)
			if logs.Allow() {
				s.log.Info().Str("slot", s.cfg.Slot).Err(err).Msg("slot is active in another process: waiting as a standby, taking over when it is released")
			}
		case errors.Is(err, errRelease):
			s.log.Info().Str("slot", s.cfg.Slot).Err(err).Msg("released the replication connection so Postgres can shut down; reconnecting")
		default:
			s.metrics.Reconnects.Inc()
			if logs.Allow() {
				s.log.Warn().Err(err).Str("slot", s.cfg.Slot).Dur("retry_in", wait).Msg("replication interrupted; reconnecting")
			}
		}
		select {
		case <-ctx.Done():
			s.drainOffline(h)
			return nil
		case <-time.After(wait):
		}
	}
}

// drainOffline waits for in-flight publishes at shutdown when there is no
// connection to confirm them on: the next start replays them, and the
// stream's dedup window absorbs the repeats.
func (s *Stream) drainOffline(h Handler) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := h.Drain(ctx); err != nil {
		s.log.Warn().Err(err).Msg("shutdown without a replication connection: unacknowledged events will be published again on restart")
	}
}

// session runs one replication connection from start to end.
func (s *Stream) session(ctx context.Context, h Handler) error {
	// A connection opened ahead (UseFirst) skips the look before
	// connecting: the take-up looked at the slot a moment ago, and
	// heldSlot looks again once the session holds it.
	opened := s.first.Swap(nil)
	if opened == nil {
		if err := s.usableSlot(ctx); err != nil {
			return err
		}
		end := startup.Phase(ctx, "repl_open")
		var err error
		opened, err = Open(ctx, s.cfg.Repl)
		end()
		if err != nil {
			return err
		}
	}
	defer opened.Close(ctx)
	conn, senderTimeout, walsender, start := opened.conn, opened.senderTimeout, opened.walsender, opened.start
	every := statusEvery(s.cfg.StatusInterval, senderTimeout)
	if s.cfg.Failover {
		if err := s.ensureFailover(ctx, conn); err != nil {
			return err
		}
	}
	end := startup.Phase(ctx, "start_replication")
	if err := s.startReplication(ctx, conn); err != nil {
		return err
	}
	end()
	end = startup.Phase(ctx, "held_slot")
	info, err := s.heldSlot(ctx, walsender)
	if err != nil {
		return err
	}
	end()
	if s.cfg.BeforeSession != nil {
		end = startup.Phase(ctx, "before_session")
		err := s.holdWhile(ctx, conn, info.ConfirmedFlush, every, func(ctx context.Context) error {
			start.Slot = info
			return s.cfg.BeforeSession(ctx, start)
		})
		end()
		if err != nil {
			return err
		}
	}
	s.streaming.Store(true)
	s.settle()
	s.metrics.Connected.Set(1)
	s.log.Info().Str("slot", s.cfg.Slot).Str("publication", s.cfg.Publication).
		Str("lsn", info.ConfirmedFlush.String()).Dur("wal_sender_timeout", senderTimeout).
		Dur("status_interval", every).
		Msg("streaming from the slot's confirmed position")
	sess := &session{
		Stream: s,
		conn:   conn,
		h:      h,
		dec:    s.newDecoder(),
		sent:   info.ConfirmedFlush,
	}
	sess.senderTimeout, sess.statusEvery = senderTimeout, every
	sess.firstWAL = startup.Phase(ctx, "first_wal")
	sess.askAfter, sess.deadAfter = silenceLimits(senderTimeout)
	return sess.run(ctx)
}

// usableSlot looks at the slot before connecting as well as after (see
// heldSlot): a slot that cannot be used is refused without a replication
// connection.
func (s *Stream) usableSlot(ctx context.Context) error {
	info, err := LookupSlot(ctx, s.pool, s.cfg.Slot)
	if err != nil {
		return err
	}
	if !info.Exists {
		return gap(fmt.Errorf("replication slot %q does not exist", s.cfg.Slot),
			"it was dropped while the relay used it; WAL written since its last confirmed position was not decoded")
	}
	return CheckSlot(info, s.cfg.Slot, s.cfg.Repl.Database)
}

// startReplication starts streaming from the slot at 0/0: the server then
// starts at the slot's confirmed_flush_lsn. Asking for a later LSN would
// silently skip the transactions before it.
func (s *Stream) startReplication(ctx context.Context, conn *pgconn.PgConn) error {
	err := pglogrepl.StartReplication(ctx, conn, s.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: s.pluginArgs(conn),
	})
	if err != nil {
		return fmt.Errorf("start replication on slot %q: %w", s.cfg.Slot, err)
	}
	return nil
}

// parseMillis parses a time setting as SHOW prints one whose base unit is
// milliseconds: a whole number with the largest unit that divides it
// ("500ms", "5s", "1min", "2h", "1d"), no unit meaning milliseconds.
func parseMillis(v string) (time.Duration, error) {
	units := []struct {
		suffix string
		unit   time.Duration
	}{{"ms", time.Millisecond}, {"s", time.Second}, {"min", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}, {"", time.Millisecond}}
	for _, u := range units {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n < 0 || n > int64(365*24*time.Hour/u.unit) {
			return 0, fmt.Errorf("unexpected time setting %q", v)
		}
		return time.Duration(n) * u.unit, nil
	}
	return 0, fmt.Errorf("unexpected time setting %q", v)
}
