package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// source keeps the relay's sink.Source, which every message it publishes
// carries, up to date: the cluster's system identifier and timeline
// (IDENTIFY_SYSTEM) at start and before each replication session, the
// slot's creation point (from the relay's record) once the slot is taken
// up. Reading the stream back, the relay trusts only the messages of its
// own slot.
type source struct {
	repl  *pgconn.Config
	stamp *sink.Stamp
	log   zerolog.Logger
	// otherLogs limits the warning about replayed events whose position
	// the stream holds with another id.
	otherLogs *retry.LogLimiter
}

// newSource identifies the Postgres system the relay streams from. The
// slot's creation point is not known yet: see slotTakenUp.
func newSource(ctx context.Context, repl *pgconn.Config, slot string, log zerolog.Logger) (*source, error) {
	id, err := identifySystem(ctx, repl)
	if err != nil {
		return nil, err
	}
	return newSourceFrom(id, repl, slot, log)
}

// newSourceFrom is newSource for a system identified already.
func newSourceFrom(id pglogrepl.IdentifySystemResult, repl *pgconn.Config, slot string, log zerolog.Logger) (*source, error) {
	// An empty identifier would stamp a zero Source, which sink.SameRelay
	// takes for every relay's: never stream with it.
	if id.SystemID == "" {
		return nil, errors.New("identify the Postgres system (IDENTIFY_SYSTEM): no system identifier")
	}
	return &source{
		repl:      repl,
		stamp:     sink.NewStamp(sink.Source{System: id.SystemID, Timeline: uint32(id.Timeline), Slot: slot}),
		log:       log,
		otherLogs: retry.NewLogLimiter(),
	}, nil
}

// forTables stamps the outbox tables, and the database they are in, on
// every message from now on: with the system, the identity the stream is
// compared by (sink.Source.SameTable). A relay of several tables is
// stamped with all of them (contract.JoinTables, the first first); each
// message carries its event's table alone (sink.Source.OfEvent).
func (s *source) forTables(tables []contract.Table) *source {
	src := s.stamp.Source()
	src.Database, src.Table = s.repl.Database, contract.JoinTables(tables)
	s.stamp.Set(src)
	return s
}

// identifySystem runs IDENTIFY_SYSTEM on a replication connection of its
// own.
func identifySystem(ctx context.Context, repl *pgconn.Config) (pglogrepl.IdentifySystemResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, repl)
	if err != nil {
		return pglogrepl.IdentifySystemResult{}, fmt.Errorf("open replication connection to %s: %w", replication.Describe(repl), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	id, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return id, fmt.Errorf("identify the Postgres system (IDENTIFY_SYSTEM): %w", err)
	}
	return id, nil
}

// slotTakenUp stamps the slot's creation point, as the relay's record
// holds it once the slot is taken up, on every message from now on.
func (s *source) slotTakenUp(ctx context.Context, store *checkpoint.Store) error {
	rec, err := store.Load(ctx)
	if err != nil {
		return err
	}
	s.setOrigin(rec.CreatedLSN)
	return nil
}

// setOrigin stamps the slot's creation point on every message from now on.
func (s *source) setOrigin(created pglogrepl.LSN) {
	src := s.stamp.Source()
	src.Origin = created
	s.stamp.Set(src)
}

// refresh takes the system's identity as a replication session found it
// (IDENTIFY_SYSTEM and the timeline's history, on its own connection). A
// new timeline (a promotion, a point-in-time recovery) is stamped from now
// on, and its fork point returned (forked): the caller takes back every
// position of the old timeline beyond it. Another system identifier means
// another cluster answers at the relay's address with a slot of the same
// name: its positions say nothing about what this relay confirmed, so the
// relay stops.
//
// handed is the commit position of the newest event this process handed
// to the sink. At or beyond the new timeline's fork point, the relay
// published events of WAL the new timeline does not have (a standby
// promoted before receiving it; synchronized_standby_slots prevents it):
// the new timeline writes other transactions at those positions, which
// this process would take for replays and skip. It stops instead: a new
// process skips only events the stream holds with the same id.
func (s *source) refresh(start replication.SessionStart, handed pglogrepl.LSN) (fork pglogrepl.LSN, forked bool, err error) {
	if s == nil {
		return 0, false, nil
	}
	id := start.System
	src := s.stamp.Source()
	if id.SystemID != src.System {
		return 0, false, &contract.FatalError{
			Err: fmt.Errorf("the Postgres server is now another cluster (system identifier %s, was %s) with a slot named %q: it is not the slot this relay streamed from",
				id.SystemID, src.System, src.Slot),
			Hint: "point the relay back at its cluster, or repair from this one (--recreate-slot)",
			Gap:  true,
		}
	}
	tl := uint32(id.Timeline)
	if tl == src.Timeline {
		return 0, false, nil
	}
	if fork, err = checkFork(src.Timeline, tl, start.TimelineHistory, handed); err != nil {
		return 0, false, err
	}
	s.log.Warn().Uint32("timeline", tl).Uint32("previous_timeline", src.Timeline).Str("slot", src.Slot).Str("fork_lsn", fork.String()).
		Msg("the Postgres timeline changed (promotion or point-in-time recovery): stamping the new one; nothing of the old one is confirmed beyond the fork point; replayed events are skipped only where the stream holds the same event id at their position")
	src.Timeline = tl
	s.stamp.Set(src)
	return fork, true, nil
}

// stampOrNil returns the stamp a publisher puts on its messages: none for a
// nil source.
func (s *source) stampOrNil() *sink.Stamp {
	if s == nil {
		return nil
	}
	return s.stamp
}

// Source returns the relay's source now (zero for a nil source).
func (s *source) Source() sink.Source {
	if s == nil {
		return sink.Source{}
	}
	return s.stamp.Source()
}

// otherEventAt notes a replayed event whose position the stream holds
// with another id: it is published, not skipped.
func (s *source) otherEventAt(ev *decode.Event, stored string) {
	if s == nil || !s.otherLogs.Allow() {
		return
	}
	s.log.Warn().Str("event_id", ev.ID).Str("stored_id", stored).Str("lsn", ev.Position.String()).
		Msg("the stream holds another event at this replayed event's position (a timeline change, or another writer): publishing it")
}

// checkFork refuses a timeline change when this process handed over
// events at or beyond the new timeline's fork point (see refresh); it
// returns the fork point.
func checkFork(from, to uint32, history []byte, handed pglogrepl.LSN) (pglogrepl.LSN, error) {
	fork, err := forkPoint(history, from, to)
	if err != nil {
		return 0, err
	}
	if handed < fork {
		return fork, nil
	}
	return 0, &contract.FatalError{
		Err: fmt.Errorf("the Postgres timeline changed from %d to %d, forking at %s, and the relay already published events committed at %s on timeline %d: their transactions are not in the new timeline, yet they are in the stream",
			from, to, fork, handed, from),
		Hint: "restart the relay (it then publishes every event of the new timeline); `outbox-relay verify` lists the orphaned events as extra; " +
			"to prevent it, set synchronized_standby_slots on the primary to the physical slots of the standbys that sync the relay's slot (docs/failover.md)",
	}
}
