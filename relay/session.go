package relay

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pglogrepl"

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
		if why := pipe.ledger.Moved(cfg.Slot, info.ConfirmedFlush); why != "" {
			return &contract.FatalError{Err: errors.New(why), Gap: true}
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
		if err := pipe.followTimeline(start); err != nil {
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
		// The slot moves from now on: where the relay last stopped no
		// longer bounds it.
		return pipe.ledger.Streaming(ctx)
	}
}

// stopped records, at a clean stop, the final position Postgres
// confirmed, while the session still holds the slot (see
// replication.Config.Stopped): the next start compares the slot with it
// exactly.
func (s *starter) stopped(pipe *pipeline) func(context.Context, pglogrepl.LSN) {
	return func(ctx context.Context, confirmed pglogrepl.LSN) {
		if err := pipe.ledger.Stopped(ctx, confirmed); err != nil {
			s.log.Warn().Err(err).Str("lsn", confirmed.String()).
				Msg("cannot record where the relay stopped: the next start checks the slot against the confirm limit only (within checkpoint.Slack)")
			return
		}
		s.log.Info().Str("lsn", confirmed.String()).Msg("recorded where the relay stopped")
	}
}
