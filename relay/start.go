package relay

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/verify"
)

// starter decides, at start, how the relay takes up its slot: resume it,
// create it (publishing the rows already in the table first), or refuse
// because events may be missing.
type starter struct {
	cfg     Config
	pool    *pgxpool.Pool
	repl    *pgconn.Config
	stream  jetstream.Stream
	store   *checkpoint.Store
	pub     *sink.Publisher
	skipped prometheus.Counter
	log     zerolog.Logger
}

func (s *starter) start(ctx context.Context) (*pipeline, checkpoint.Action, error) {
	cfg := s.cfg
	store := s.store
	slot, err := replication.LookupSlot(ctx, s.pool, cfg.Slot)
	if err != nil {
		return nil, 0, err
	}
	if slot.Exists && !s.cfg.Repair {
		if err := replication.CheckSlot(slot, cfg.Slot, s.repl.Database); err != nil {
			return nil, 0, err
		}
	}
	rec, err := store.Load(ctx)
	if err != nil {
		return nil, 0, err
	}
	last, err := sink.LastEvent(ctx, s.stream, cfg.Subject.Filter(), cfg.DeadLetterSubject)
	if err != nil {
		return nil, 0, err
	}
	state := checkpoint.SlotState{
		Name: cfg.Slot, Exists: slot.Exists, Confirmed: slot.ConfirmedFlush,
		Lost: slot.WALStatus == "lost", Record: rec,
	}
	if last != nil {
		state.StreamCount = last.Seq
	}
	action, err := checkpoint.Decide(state)
	if s.cfg.Repair {
		action, err = checkpoint.Repair, nil
		s.log.Warn().Str("slot", cfg.Slot).Msg("repairing: dropping the slot and its record, creating a new one and publishing, from its snapshot, every row the stream lacks")
		if slot.Exists {
			if err := replication.DropSlot(ctx, s.pool, cfg.Slot); err != nil {
				return nil, 0, err
			}
		}
		if err := store.Delete(ctx); err != nil {
			return nil, 0, err
		}
	}
	if err != nil {
		return nil, 0, err
	}
	s.log.Info().Str("slot", cfg.Slot).Str("action", action.String()).Str("lsn", slot.ConfirmedFlush.String()).Msg("taking up the replication slot")

	pipe := &pipeline{pub: s.pub, tracker: checkpoint.NewTracker(slot.ConfirmedFlush), skipped: s.skipped}
	switch action {
	case checkpoint.Resume:
		pipe.ledger = checkpoint.NewLedger(store, rec.Limit, s.log)
	case checkpoint.Adopt:
		s.log.Warn().Str("slot", cfg.Slot).Msg("the slot existed before the relay's first start: rows inserted before it was created are not published (`outbox-relay verify` lists them)")
		if err := store.Create(ctx, slot.ConfirmedFlush, true); err != nil {
			return nil, 0, err
		}
		pipe.ledger = checkpoint.NewLedger(store, slot.ConfirmedFlush, s.log)
	case checkpoint.RedoBootstrap, checkpoint.Bootstrap, checkpoint.Repair:
		if action == checkpoint.RedoBootstrap {
			s.log.Warn().Str("slot", cfg.Slot).Msg("a previous start did not finish publishing the rows present at the slot's creation: dropping the slot and starting over (rows already published may be published again; the stream's dedup window absorbs repeats)")
			if slot.Exists {
				if err := replication.DropSlot(ctx, s.pool, cfg.Slot); err != nil {
					return nil, 0, err
				}
			}
		}
		point, err := s.bootstrap(ctx, store, pipe, action == checkpoint.Repair)
		if err != nil {
			return nil, 0, err
		}
		pipe.ledger = checkpoint.NewLedger(store, point, s.log)
	}
	pipe.gate = checkpoint.NewGate(pipe.ledger, s.checkPublication, s.log.With().Str("component", "checkpoint").Logger())
	return pipe, action, nil
}

// checkPublication returns the WAL position before which the outbox table
// was verified to be in the publication.
func (s *starter) checkPublication(ctx context.Context) (pglogrepl.LSN, error) {
	var at pglogrepl.LSN
	if err := s.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&at); err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	if err := replication.CheckPublication(ctx, s.pool, s.cfg.Table, s.cfg.Publication); err != nil {
		return 0, err
	}
	return at, nil
}

// bootstrap creates the slot and publishes, from its snapshot, the rows
// that were in the table and not processed (for example by a polling relay
// this one replaces). Streaming then starts exactly after them. With
// repair set it publishes instead every row of the snapshot that the
// stream lacks: the way back after a gap.
func (s *starter) bootstrap(ctx context.Context, store *checkpoint.Store, pipe *pipeline, repair bool) (pglogrepl.LSN, error) {
	cfg := s.cfg
	src, err := NewRowSource(ctx, s.pool, cfg.Table)
	if err != nil {
		return 0, err
	}
	var published int
	point, err := replication.CreateSlot(ctx, s.repl, s.pool, cfg.Slot, func(ctx context.Context, tx pgx.Tx, point pglogrepl.LSN) error {
		if err := store.Create(ctx, point, false); err != nil {
			return err
		}
		offer := func(ev *decode.Event) error { return pipe.publish(ctx, ev) }
		switch {
		case repair:
			published, err = s.publishMissing(ctx, tx, src, offer)
		case src.Has("processed_at"):
			published, err = src.Each(ctx, tx, "processed_at IS NULL", nil, offer)
		default:
			s.log.Warn().Str("table", cfg.Table.String()).Msg("the table has no processed_at column: rows already in it are not published, only rows inserted from now on")
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	if err := pipe.Drain(ctx); err != nil {
		return 0, fmt.Errorf("publish the rows present at the slot's creation: %w", err)
	}
	if err := store.MarkBootstrapped(ctx); err != nil {
		return 0, err
	}
	s.log.Info().Str("slot", cfg.Slot).Str("lsn", point.String()).Int("published", published).Bool("repair", repair).
		Msg("created the replication slot; published the rows the stream needed from the table")
	return point, nil
}

// publishMissing publishes the rows db sees that the stream lacks.
func (s *starter) publishMissing(ctx context.Context, db verify.Querier, src *RowSource, offer func(*decode.Event) error) (int, error) {
	cfg := s.cfg
	rep, err := verify.Run(ctx, db, s.stream, verify.Options{Table: cfg.Table, Subjects: []string{cfg.Subject.Filter(), cfg.DeadLetterSubject}, Since: s.cfg.RepairSince})
	if err != nil {
		return 0, err
	}
	s.log.Warn().Int("missing", len(rep.Missing)).Int("rows", rep.Rows).Int("messages", rep.Messages).
		Msg("repairing: publishing the committed rows the stream lacks")
	if len(rep.Missing) == 0 {
		return 0, nil
	}
	return src.Each(ctx, db, "id::text = ANY($1)", []any{rep.Missing}, offer)
}
