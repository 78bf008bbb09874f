package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// beforeSession runs at the start of each replication session, once the
// session holds the slot and before it reads from it: what the stream
// holds beyond the slot's position can no longer grow under it. It checks
// that the slot is still the one the relay confirms (never beyond what the ledger
// allowed) and that the server is still the same cluster, then reads
// which events of the coming replay the stream already holds (the events'
// stream and the dead-letter subject's, only the messages of this relay's
// slot, with their ids), so exactly those are skipped.
func (s *starter) beforeSession(pipe *pipeline) func(context.Context, replication.SessionStart) error {
	cfg := s.cfg
	return func(ctx context.Context, start replication.SessionStart) error {
		info := start.Slot
		end := startup.Phase(ctx, "ledger_refresh")
		if err := pipe.ledger.Refresh(ctx); err != nil {
			return err
		}
		end()
		if info.ConfirmedFlush > pipe.ledger.Allowed() {
			return &contract.FatalError{
				Err: fmt.Errorf("replication slot %q is at %s, beyond anything this relay confirmed (%s): it was recreated or advanced by someone else, and events in between may be missing from the stream",
					cfg.Slot, info.ConfirmedFlush, pipe.ledger.Allowed()),
				Gap: true,
			}
		}
		// A promotion or point-in-time recovery changes the timeline the
		// messages are stamped with; another cluster stops the relay.
		if err := pipe.source.refresh(start, pipe.tracker.Last().CommitLSN); err != nil {
			return err
		}
		stored := &checkpoint.Stored{}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		end = startup.Phase(ctx, "dead_letter_stream")
		dead, err := pipe.source.deadLetters(rctx, s.stream, cfg.DeadLetterSubject)
		end()
		if err != nil {
			return err
		}
		tail := jetstream.Tail{
			Stream: s.stream, Subject: cfg.Subject.Filter(),
			DeadLetters: dead, DeadLetterSubject: cfg.DeadLetterSubject,
			From: info.ConfirmedFlush, Source: pipe.source.Source(),
		}
		var deadLetters []sink.StoredEvent
		end = startup.Phase(ctx, "tail_read")
		defer end()
		err = jetstream.ReadTail(rctx, tail, func(ev sink.StoredEvent) {
			stored.Add(ev.Position, ev.ID)
			if ev.DeadLetter {
				deadLetters = append(deadLetters, ev)
			}
		})
		if err != nil {
			return fmt.Errorf("read what the stream holds beyond the slot's position %s: %w", info.ConfirmedFlush, err)
		}
		if err := recordStoredDeadLetters(ctx, s.store, deadLetters); err != nil {
			return err
		}
		pipe.stored, pipe.from = stored, info.ConfirmedFlush
		if stored.Len() > 0 {
			s.log.Info().Int("events", stored.Len()).Str("lsn", info.ConfirmedFlush.String()).
				Msg("the stream already holds events the slot will replay: skipping exactly those")
		}
		return nil
	}
}

// recordStoredDeadLetters records in Postgres the dead letters the stream
// holds beyond the slot's position. Their events are skipped on replay, so
// one whose PubAck arrived just before the relay died, before its record
// was written, would otherwise never be listed. Recording one that is
// listed already changes nothing (same commit: see Store.RecordDeadLetter).
func recordStoredDeadLetters(ctx context.Context, store *checkpoint.Store, dead []sink.StoredEvent) error {
	for _, ev := range dead {
		key := ev.ID
		if key == "" {
			key = ev.Position.String()
		}
		if err := store.RecordDeadLetter(ctx, key, ev.Reason, ev.Position.CommitLSN); err != nil {
			return err
		}
	}
	return nil
}
