package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/replication"
)

// beforeSession runs at the start of each replication session, once the
// session holds the slot and before it reads from it: what the stream
// holds beyond the slot's position can no longer grow under it. It checks
// that the slot is still the one the relay confirms (never beyond what the ledger
// allowed) and that the server is still the same cluster, then reads
// which events of the coming replay the stream already holds (the events'
// stream and the dead-letter subject's, only the messages of this relay's
// slot, with their ids: checkpoint.Holdings), so exactly those are
// skipped.
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
		// Another relay streaming the table, which this one's take-up did
		// not see active (it was between sessions), stops this one: it
		// holds its slot now, so of two relays the second to look sees
		// the first (relay/others.go).
		if err := secondRelay(ctx, s.store, s.pool, cfg, false, s.log); err != nil {
			return err
		}
		// A promotion or point-in-time recovery changes the timeline the
		// messages are stamped with; another cluster stops the relay.
		if err := pipe.source.refresh(start, pipe.tracker.Last().CommitLSN); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		end = startup.Phase(ctx, "tail_read")
		held, err := checkpoint.ReadHoldings(rctx, s.reader, info.ConfirmedFlush)
		end()
		if err != nil {
			return err
		}
		if err := held.RecordDeadLetters(ctx, s.store); err != nil {
			return err
		}
		pipe.held, pipe.from = held, info.ConfirmedFlush
		if held.Len() > 0 {
			s.log.Info().Int("events", held.Len()).Str("lsn", info.ConfirmedFlush.String()).
				Msg("the stream already holds events the slot will replay: skipping exactly those")
		}
		return nil
	}
}
