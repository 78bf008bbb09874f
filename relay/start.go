package relay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/progress"
	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/verify"
)

// starter decides, at start, how the relay takes up its slot: resume it,
// create it (publishing the rows already in the table first), repair it,
// or refuse because events may be missing.
//
// Everything up to the point where streaming can start is one protocol,
// exclusive among instances (the take-up lock) and written ahead in the
// relay's record (its kind, then the slot's creation point, then its end),
// so that a take-up killed at any instant is redone the same way by the
// next instance to start, and a slot whose take-up is unfinished is never
// streamed.
type starter struct {
	cfg  Config
	pool *pgxpool.Pool // where the slot is: --pg-url
	// record is where the relay keeps its record and takes its lock:
	// pool, or the primary of --primary-url when pool is a standby.
	record *pgxpool.Pool
	repl   *pgconn.Config
	// reader reads back what the destination holds of this relay's
	// events; pub is where it publishes them.
	reader  sink.Reader
	store   *checkpoint.Store
	pub     sink.Destination
	skipped prometheus.Counter
	log     zerolog.Logger
	// standby is set when pool is a hot standby (--primary-url).
	standby bool
	// slotWait is how long creating the slot took, until its snapshot
	// could be read (on a standby: until the primary's WAL let it).
	slotWait time.Duration
	// lockConn opens the take-up lock's connection on record (started
	// ahead).
	lockConn *ahead[*pgx.Conn]
	// closeRepl closes the replication connection opened ahead for the
	// first session, before a slot is created: that takes a WAL sender of
	// its own, and max_wal_senders may leave the relay only one.
	closeRepl func()
	// nudges counts the running-transactions records the primary wrote
	// at the relay's request while the slot was created on the standby.
	nudges int
	// publication is the identity of the publication recorded with the
	// slot; the confirmation gate compares it with the live one.
	publication string
	// origin is the slot's creation point, as the take-up recorded it.
	origin pglogrepl.LSN
	// checked is the check of the setup (replication.Check), run beside
	// the take-up's first reads: it is waited for before the take-up acts
	// (writes the record, creates or drops a slot) or waits for another
	// instance's lock, and its error comes first.
	checked *ahead[struct{}]
}

// setupChecked waits for the setup's check and returns its error.
func (s *starter) setupChecked() error {
	if s.checked == nil {
		return nil
	}
	_, err := s.checked.wait()
	return err
}

func (s *starter) start(ctx context.Context) (*pipeline, checkpoint.Action, error) {
	pipe, action, err := s.takeUp(ctx)
	if err != nil {
		if cerr := s.setupChecked(); cerr != nil {
			return nil, 0, cerr
		}
	}
	return pipe, action, err
}

func (s *starter) takeUp(ctx context.Context) (*pipeline, checkpoint.Action, error) {
	end := startup.Phase(ctx, "check_primary")
	if err := s.checkServers(ctx); err != nil {
		return nil, 0, err
	}
	end()
	if s.cfg.Failover {
		if err := s.checkFailover(ctx); err != nil {
			return nil, 0, err
		}
	}
	end = startup.Phase(ctx, "take_up_lock")
	conn, err := s.lockConn.wait()
	if err != nil {
		return nil, 0, err
	}
	lock, err := lockTakeUp(ctx, conn, s.cfg.Slot, s.beforeLockWait, s.log)
	end()
	if err != nil {
		return nil, 0, err
	}
	defer lock.release()
	// The record is read and written on the lock's connection: a write that
	// succeeds is one made while this instance held the lock.
	locked := s.store.On(lock.conn)
	end = startup.Phase(ctx, "decide")
	slot, rec, action, err := s.decide(ctx, locked)
	end()
	if err != nil {
		return nil, 0, err
	}
	if err := s.setupChecked(); err != nil {
		return nil, 0, err
	}
	s.log.Info().Str("slot", s.cfg.Slot).Str("action", action.String()).Str("lsn", slot.ConfirmedFlush.String()).Msg("taking up the replication slot")

	if s.cfg.Failover && slot.Exists && (action == checkpoint.Resume || action == checkpoint.Adopt) {
		if err := s.noteFailover(ctx); err != nil {
			return nil, 0, err
		}
	}
	pipe := &pipeline{pub: s.pub, tracker: checkpoint.NewTracker(slot.ConfirmedFlush), skipped: s.skipped}
	var created, limit pglogrepl.LSN
	switch action {
	case checkpoint.Resume:
		created, limit = rec.CreatedLSN, rec.Limit
		end = startup.Phase(ctx, "publication")
		if err := s.samePublication(ctx, locked, rec); err != nil {
			return nil, 0, err
		}
		if err := locked.SetTable(ctx); err != nil { // a record made before the table was recorded
			return nil, 0, err
		}
		end()
	case checkpoint.Adopt:
		s.log.Warn().Str("slot", s.cfg.Slot).Msg("the slot existed before the relay's first start: rows inserted before it was created are not published (`outbox-relay verify` lists them)")
		if s.publication, err = s.publicationIdentity(ctx); err != nil {
			return nil, 0, err
		}
		if err := locked.Adopt(ctx, slot.ConfirmedFlush, s.publication); err != nil {
			return nil, 0, err
		}
		created, limit = slot.ConfirmedFlush, slot.ConfirmedFlush
	default:
		t := s.takeUpKind(action, rec)
		if created, err = s.createAndPublish(ctx, lock, locked, slot, pipe, t); err != nil {
			return nil, 0, err
		}
		limit = created
	}
	s.origin = created
	pipe.ledger = checkpoint.NewLedger(s.store, created, limit, s.log)
	pipe.gate = checkpoint.NewGate(pipe.ledger, s.checkPublication, s.log.With().Str("component", "checkpoint").Logger())
	return pipe, action, nil
}

// decide reads the slot, the record and the stream, and chooses.
func (s *starter) decide(ctx context.Context, locked *checkpoint.Store) (replication.SlotInfo, checkpoint.Record, checkpoint.Action, error) {
	cfg := s.cfg
	slot, err := replication.LookupSlot(ctx, s.pool, cfg.Slot)
	if err != nil {
		return slot, checkpoint.Record{}, 0, err
	}
	if slot.Exists && !cfg.Repair {
		if s.standby && slot.WALStatus == "lost" {
			return slot, checkpoint.Record{}, 0, s.standbySlotLost(ctx, slot)
		}
		if err := replication.CheckSlot(slot, cfg.Slot, s.repl.Database); err != nil {
			return slot, checkpoint.Record{}, 0, err
		}
	}
	// Another relay streaming the table: refused before anything is
	// created or published (relay/others.go).
	if err := secondRelay(ctx, locked, s.pool, cfg, true, s.log); err != nil {
		return slot, checkpoint.Record{}, 0, err
	}
	rec, err := locked.Load(ctx)
	if err != nil {
		return slot, rec, 0, err
	}
	last, err := untilAnswered(ctx, s.log, cfg.Stream, s.reader.Last)
	if err != nil {
		return slot, rec, 0, err
	}
	state := checkpoint.SlotState{
		Name: cfg.Slot, Exists: slot.Exists, Confirmed: slot.ConfirmedFlush,
		Lost: slot.WALStatus == "lost", Record: rec,
	}
	if last != nil {
		state.StreamCount = last.Seq
	}
	if cfg.Repair {
		return slot, rec, checkpoint.Repair, nil
	}
	action, err := checkpoint.Decide(state)
	return slot, rec, action, err
}

// takeUp is what a new slot's snapshot is used for.
type takeUp struct {
	kind  checkpoint.Kind
	since time.Time // a repair's lower bound on created_at
	// redo is set when a previous take-up of the same kind did not finish:
	// some rows may be in the stream already.
	redo bool
}

func (s *starter) takeUpKind(action checkpoint.Action, rec checkpoint.Record) takeUp {
	switch action {
	case checkpoint.Repair:
		s.log.Warn().Str("slot", s.cfg.Slot).Msg("repairing: dropping the slot, creating a new one and publishing, from its snapshot, every row the stream lacks")
		return takeUp{kind: checkpoint.KindRepair, since: s.cfg.RepairSince}
	case checkpoint.RedoRepair:
		s.log.Warn().Str("slot", s.cfg.Slot).Time("repair_since", rec.RepairSince).Msg("a previous repair did not finish: repairing again, with the same bounds")
		return takeUp{kind: checkpoint.KindRepair, since: rec.RepairSince, redo: true}
	case checkpoint.RedoBootstrap:
		s.log.Warn().Str("slot", s.cfg.Slot).Msg("a previous start did not finish publishing the rows present at the slot's creation: dropping the slot and starting over, publishing only what the stream lacks")
		return takeUp{kind: checkpoint.KindInitial, redo: true}
	}
	return takeUp{kind: checkpoint.KindInitial}
}

// beforeLockWait runs when another instance holds the take-up lock: the
// setup's error comes first, and the replication connection opened ahead
// is closed. The wait can last as long as the other instance's take-up
// (a backlog published from a snapshot: hours), and meanwhile the
// connection would hold a WAL sender that instance may need, and an
// identity (timeline) that may be stale when this one streams.
func (s *starter) beforeLockWait() error {
	if err := s.setupChecked(); err != nil {
		return err
	}
	if s.closeRepl != nil {
		s.closeRepl()
	}
	return nil
}

// createAndPublish records the take-up, replaces the slot, publishes from
// the new slot's snapshot what t asks for, and records the end: each step
// written down before the next, on the lock's connection.
func (s *starter) createAndPublish(ctx context.Context, lock *takeUpLock, locked *checkpoint.Store, slot replication.SlotInfo, pipe *pipeline, t takeUp) (pglogrepl.LSN, error) {
	if s.closeRepl != nil {
		s.closeRepl()
	}
	if err := locked.Begin(ctx, t.kind, t.since); err != nil {
		return 0, err
	}
	if slot.Exists {
		if err := replication.DropSlot(ctx, s.pool, s.cfg.Slot); err != nil {
			return 0, err
		}
	}
	point, published, err := s.bootstrap(ctx, locked, pipe, t)
	if err != nil {
		return 0, err
	}
	if err := lock.held(ctx); err != nil {
		return 0, err
	}
	if err := locked.MarkBootstrapped(ctx, point); err != nil {
		return 0, err
	}
	s.log.Info().Str("slot", s.cfg.Slot).Str("lsn", point.String()).Int("published", published).Str("kind", string(t.kind)).Bool("redo", t.redo).
		Int64("create_ms", s.slotWait.Milliseconds()).Int("nudges", s.nudges).
		Msg("created the replication slot; published the rows the stream needed from the table")
	return point, nil
}

// bootstrap creates the slot and publishes from its snapshot: for the
// initial take-up, the rows that were in the table and not processed (for
// example by a polling relay this one replaces); for a repair, every row.
// Either way only the rows whose events the stream lacks: what it holds
// is decided by the events' identity (their system, table and id), not by
// the slot's name, so a new or renamed slot, a second deployment or a
// take-up redone publishes nothing the stream has. Streaming then starts
// exactly after them.
func (s *starter) bootstrap(ctx context.Context, locked *checkpoint.Store, pipe *pipeline, t takeUp) (pglogrepl.LSN, int, error) {
	cfg := s.cfg
	src, err := NewRowSource(ctx, s.pool, cfg.Table, cfg.MoreTables...)
	if err != nil {
		return 0, 0, err
	}
	unprocessed := src.Having("processed_at")
	var published int
	began := time.Now()
	point, err := replication.CreateSlot(ctx, s.repl, s.pool, cfg.Slot, s.slotOptions(), func(ctx context.Context, tx pgx.Tx, point pglogrepl.LSN) error {
		s.slotWait = time.Since(began)
		id, err := s.publicationIdentity(ctx)
		if err != nil {
			return err
		}
		if err := locked.Created(ctx, point, id); err != nil {
			return err
		}
		s.publication = id
		offer := func(ev *decode.Event) error { return pipe.publish(ctx, ev) }
		switch {
		case t.kind == checkpoint.KindRepair:
			published, err = s.publishLacking(ctx, tx, src, "", t.since, offer)
		case unprocessed == nil:
			s.warnNoProcessedAt(src)
		default:
			s.warnNoProcessedAt(src)
			published, err = s.publishLacking(ctx, tx, unprocessed, "processed_at IS NULL", time.Time{}, offer)
		}
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	if err := pipe.Drain(ctx); err != nil {
		return 0, 0, fmt.Errorf("publish the rows present at the slot's creation: %w", err)
	}
	return point, published, nil
}

// warnNoProcessedAt says which tables' rows present at the slot's
// creation are not published, for want of a processed_at column.
func (s *starter) warnNoProcessedAt(src *RowSource) {
	for _, t := range src.Without("processed_at") {
		s.log.Warn().Str("table", t.String()).Msg("the table has no processed_at column: rows already in it are not published, only rows inserted from now on")
	}
}

// publishLacking publishes the rows db sees (those matching where, when
// set, created at or after since, when set) whose events the stream lacks
// (checkpoint.TableHoldings: any message of the same system and table,
// whichever slot published it; of a relay of several tables, of the row's
// own table, by its qualified id). Rows older than what the stream's own
// limits (max age, size, count) left in it are not compared: their events
// were removed, not lost, and the log says how many were left out. The
// stream is read only when there are rows to compare, and only from the
// oldest one's created_at on.
func (s *starter) publishLacking(ctx context.Context, db verify.Querier, src *RowSource, where string, since time.Time, offer func(*decode.Event) error) (int, error) {
	opts := verify.Options{Table: s.cfg.Table, MoreTables: s.cfg.MoreTables, Since: since}
	left, err := verify.NarrowToHorizon(ctx, db, s.reader, &opts)
	if err != nil {
		return 0, err
	}
	if left != nil {
		s.logLeftOut(left)
	}
	where, args := rowFilter(where, opts.Since)
	oldest, rows, err := src.Oldest(ctx, db, where, args)
	if err != nil || rows == 0 {
		return 0, err
	}
	held, err := checkpoint.ReadTableHoldings(ctx, s.reader, oldest, s.log)
	if err != nil {
		return 0, err
	}
	published := 0
	// A large backlog takes a while: a line every 10s says how far.
	prog := progress.New("publishing the rows the stream lacks, from the slot's snapshot", rows, s.log)
	stop := prog.Every(ctx, 0)
	_, err = src.Each(ctx, db, where, args, func(ev *decode.Event) error {
		prog.Add()
		if held.Holds(ev) {
			return nil
		}
		published++
		return offer(ev)
	})
	stop()
	s.log.Info().Int("missing", published).Int("rows", rows).Int("held", held.Len()).Int("messages", held.Read()).
		Msg("published the rows the stream lacked, from the slot's snapshot")
	return published, err
}

// logLeftOut says which rows a take-up did not compare because the
// stream's limits removed their events, and how to publish them if some
// never reached the stream.
func (s *starter) logLeftOut(l *verify.LeftOut) {
	if l.Rows == 0 {
		return
	}
	s.log.Warn().Int("left_out", l.Rows).Time("before", l.Before).Time("from", l.First).Str("oldest_event_id", l.OldestID).Str("limits", l.Limits).
		Str("fix", fmt.Sprintf("if some of them never reached the stream, publish them: outbox-relay verify --since %s --until %s --republish",
			l.First.UTC().Truncate(time.Second).Format(time.RFC3339), l.Before.UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339))).
		Msg("left out the rows created at or before the oldest event the stream holds: the stream's limits removed their events, which are not lacking")
}

// rowFilter is the SQL condition, and its arguments, of the rows created
// at or after since (zero: any) that match where ("": all).
func rowFilter(where string, since time.Time) (string, []any) {
	conds := []string{"true"}
	if where != "" {
		conds = append(conds, where)
	}
	var args []any
	if !since.IsZero() {
		conds, args = append(conds, "created_at >= $1"), []any{since}
	}
	return strings.Join(conds, " AND "), args
}

// publicationIdentity reads how the publication holds the table now.
func (s *starter) publicationIdentity(ctx context.Context) (string, error) {
	return replication.PublicationIdentities(ctx, s.pool, s.cfg.Tables(), s.cfg.Publication)
}

// samePublication refuses a publication that changed since the slot was
// created: pgoutput may have skipped inserts meanwhile. A record written by
// an older relay gets the identity now.
func (s *starter) samePublication(ctx context.Context, locked *checkpoint.Store, rec checkpoint.Record) error {
	id, err := s.publicationIdentity(ctx)
	if err != nil {
		return err
	}
	s.publication = id
	if rec.Publication == "" {
		return locked.SetPublication(ctx, rec.CreatedLSN, id)
	}
	return s.comparePublication(id, rec.Publication)
}

func (s *starter) comparePublication(now, recorded string) error {
	if now == recorded {
		return nil
	}
	return &contract.FatalError{
		Err: fmt.Errorf("publication %q changed since the relay took up slot %q (was %q, now %q): inserts made while the table was not published the same way may not have been decoded",
			s.cfg.Publication, s.cfg.Slot, recorded, now),
		Hint: fmt.Sprintf("make sure the publication holds %s for inserts, with no row filter and no column list (ALTER PUBLICATION %s SET (publish = 'insert')); "+
			"if the relay's tables changed (a --table added or removed), that is a new take-up: run once with --recreate-slot, which publishes from the new slot's snapshot only what the stream lacks",
			contract.JoinTables(s.cfg.Tables()), s.cfg.Publication),
		Gap: true,
	}
}

// checkPublication returns the WAL position before which the outbox table
// was verified to be in the publication, unchanged since the slot's
// creation.
func (s *starter) checkPublication(ctx context.Context) (pglogrepl.LSN, error) {
	// On a standby, its replay position: the catalog read next is at
	// least that recent.
	at, err := replication.WALPosition(ctx, s.pool)
	if err != nil {
		return 0, err
	}
	if err := replication.CheckPublicationTables(ctx, s.pool, s.cfg.Tables(), s.cfg.Publication); err != nil {
		return 0, err
	}
	id, err := s.publicationIdentity(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.comparePublication(id, s.publication); err != nil {
		return 0, err
	}
	return at, nil
}
