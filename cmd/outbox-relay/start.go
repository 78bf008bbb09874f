package main

import (
	"context"
	"fmt"
	"time"

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
)

// starter decides, at start, how the relay takes up its slot: resume it,
// create it (publishing the rows already in the table first), or refuse
// because events may be missing.
type starter struct {
	cfg     relayConfig
	pool    *pgxpool.Pool
	repl    *pgconn.Config
	stream  jetstream.Stream
	store   *checkpoint.Store
	pub     *sink.Publisher
	skipped prometheus.Counter
	log     zerolog.Logger
}

func (s *starter) start(ctx context.Context) (*pipeline, error) {
	names := s.cfg.names
	store := s.store
	slot, err := replication.LookupSlot(ctx, s.pool, names.slot)
	if err != nil {
		return nil, err
	}
	if slot.Exists {
		if err := replication.CheckSlot(slot, names.slot, s.repl.Database); err != nil {
			return nil, err
		}
	}
	rec, err := store.Load(ctx)
	if err != nil {
		return nil, err
	}
	last, err := sink.LastEvent(ctx, s.stream, names.subject.Filter(), names.deadLetter)
	if err != nil {
		return nil, err
	}
	state := checkpoint.SlotState{
		Name: names.slot, Exists: slot.Exists, Confirmed: slot.ConfirmedFlush,
		Lost: slot.WALStatus == "lost", Record: rec,
	}
	if last != nil {
		state.StreamCount = last.Seq
	}
	action, err := checkpoint.Decide(state)
	if err != nil {
		return nil, err
	}
	s.log.Info().Str("slot", names.slot).Str("action", action.String()).Str("lsn", slot.ConfirmedFlush.String()).Msg("taking up the replication slot")

	pipe := &pipeline{pub: s.pub, tracker: checkpoint.NewTracker(slot.ConfirmedFlush), skipped: s.skipped,
		guard: func(ctx context.Context) error {
			return replication.CheckPublication(ctx, s.pool, names.table, names.publication)
		}}
	switch action {
	case checkpoint.Resume:
		pipe.ledger = checkpoint.NewLedger(store, rec.Limit, s.log)
	case checkpoint.Adopt:
		s.log.Warn().Str("slot", names.slot).Msg("the slot existed before the relay's first start: rows inserted before it was created are not published (use `outbox-relay verify` to check)")
		if err := store.Create(ctx, slot.ConfirmedFlush, true); err != nil {
			return nil, err
		}
		pipe.ledger = checkpoint.NewLedger(store, slot.ConfirmedFlush, s.log)
	case checkpoint.RedoBootstrap, checkpoint.Bootstrap:
		if action == checkpoint.RedoBootstrap {
			s.log.Warn().Str("slot", names.slot).Msg("a previous start did not finish publishing the rows present at the slot's creation: dropping the slot and starting over (rows already published may be published again; the stream's dedup window absorbs repeats)")
			if slot.Exists {
				if err := replication.DropSlot(ctx, s.pool, names.slot); err != nil {
					return nil, err
				}
			}
		}
		point, err := s.bootstrap(ctx, store, pipe)
		if err != nil {
			return nil, err
		}
		pipe.ledger = checkpoint.NewLedger(store, point, s.log)
	}
	return pipe, nil
}

// bootstrap creates the slot and publishes, from its snapshot, the rows
// that were in the table and not processed (for example by a polling
// relay this one replaces). Streaming then starts exactly after them.
func (s *starter) bootstrap(ctx context.Context, store *checkpoint.Store, pipe *pipeline) (pglogrepl.LSN, error) {
	names := s.cfg.names
	cols, err := replication.Columns(ctx, s.pool, names.table)
	if err != nil {
		return 0, err
	}
	var published int
	point, err := replication.CreateSlot(ctx, s.repl, s.pool, names.slot, func(ctx context.Context, tx pgx.Tx, point pglogrepl.LSN) error {
		if err := store.Create(ctx, point, false); err != nil {
			return err
		}
		if _, ok := cols["processed_at"]; !ok {
			s.log.Warn().Str("table", names.table.String()).Msg("the table has no processed_at column: rows already in it are not published, only rows inserted from now on")
			return nil
		}
		published, err = publishExisting(ctx, tx, names.table, cols, pipe)
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
	s.log.Info().Str("slot", names.slot).Str("lsn", point.String()).Int("published", published).
		Msg("created the replication slot; published the unprocessed rows that were already in the table")
	return point, nil
}

// publishExisting publishes the table's unprocessed rows. Their WAL order
// is out of reach (it may predate the slot by years), so they go out in
// the best order Postgres still knows: commit timestamps when
// track_commit_timestamp is on, then created_at (the order the seed's
// polling relay used), then physical order, which keeps the rows of one
// transaction in insertion order.
func publishExisting(ctx context.Context, tx pgx.Tx, table decode.Table, cols map[string]string, pipe *pipeline) (int, error) {
	created := "NULL"
	order := "ctid"
	if _, ok := cols[decode.ColumnCreatedAt]; ok {
		created = "created_at::text"
		order = "created_at, ctid"
	}
	var commitTS string
	if err := tx.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp')`).Scan(&commitTS); err != nil {
		return 0, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	if commitTS == "on" {
		order = "pg_xact_commit_timestamp(xmin) NULLS FIRST, " + order
	}
	rows, err := tx.Query(ctx, `SELECT id::text, aggregate_type::text, aggregate_id::text, event_type::text, payload::text, `+created+`
		FROM `+table.Quoted()+` WHERE processed_at IS NULL ORDER BY `+order)
	if err != nil {
		return 0, fmt.Errorf("read the unprocessed rows of %s: %w", table, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		v := rows.RawValues()
		ev := decode.NewEvent(decode.Fields{
			ID: v[0], AggregateType: v[1], AggregateID: v[2], EventType: v[3], Payload: v[4], CreatedAt: v[5],
			PayloadIsBytea: cols[decode.ColumnPayload] == "bytea",
			HasCreatedAt:   created != "NULL",
		}, decode.Position{Index: uint32(n)})
		if err := pipe.offer(ctx, &ev); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read the unprocessed rows of %s: %w", table, err)
	}
	return n, nil
}

// beforeSession runs before each replication session. It checks that the
// slot is still the one the relay confirms (never beyond what the ledger
// allowed), then reads which events of the coming replay the stream
// already holds, so exactly those are skipped.
func (s *starter) beforeSession(pipe *pipeline) func(context.Context, replication.SlotInfo) error {
	names := s.cfg.names
	return func(ctx context.Context, info replication.SlotInfo) error {
		if err := pipe.ledger.Refresh(ctx); err != nil {
			return err
		}
		if info.ConfirmedFlush > pipe.ledger.Allowed() {
			return &replication.FatalError{
				Err: fmt.Errorf("replication slot %q is at %s, beyond anything this relay confirmed (%s): it was recreated or advanced by someone else",
					names.slot, info.ConfirmedFlush, pipe.ledger.Allowed()),
				Hint: reconcileHint,
			}
		}
		stored := &checkpoint.Stored{}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		err := sink.ReadTail(rctx, s.stream, []string{names.subject.Filter(), names.deadLetter}, names.subject.Filter(), info.ConfirmedFlush,
			func(ev sink.StoredEvent) { stored.Add(ev.Position) })
		if err != nil {
			return fmt.Errorf("read what the stream holds beyond the slot's position %s: %w", info.ConfirmedFlush, err)
		}
		pipe.stored = stored
		if stored.Len() > 0 {
			s.log.Info().Int("events", stored.Len()).Str("lsn", info.ConfirmedFlush.String()).
				Msg("the stream already holds events the slot will replay: skipping exactly those")
		}
		return nil
	}
}

// reconcileHint is what to do when events may be missing.
const reconcileHint = "events in between may be missing from the stream: run `outbox-relay verify --republish` to publish the rows the stream lacks, then start the relay with --recreate-slot"
