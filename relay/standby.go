package relay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Reading from a standby (--primary-url, Postgres 16+).
//
// The slot, the replication connection, the snapshot the slot exports at
// its creation (the rows already in the table are read there) and the
// slot's monitoring are on the standby, --pg-url. Everything the relay
// writes is on the primary, --primary-url: its record of the take-up, the
// take-up lock, the confirm limit, the dead letters. Both are one WAL (the
// standby replays the primary's), so the positions the record holds and
// those of the standby's slot compare; where a primary answers
// pg_current_wal_lsn(), the standby answers its replay position.
//
// Ack after publish holds as on a primary: the relay confirms to the
// standby's slot only what the confirm limit allows, and it writes that
// limit on the primary, committed, before it confirms beyond it; it reads
// the record back from the primary, never from the standby's replayed
// copy, so what it compares the slot with is the record's newest state.
// The slot cannot be confirmed past what the standby replayed (the relay
// confirms positions the standby sent), and that is never past what the
// primary wrote.

// checkServers verifies the server(s): without --primary-url the one
// database must accept writes; with it, --pg-url must be a standby fit to
// read from (replication.CheckStandbyRead) and the slot's name one no
// other server uses (replication.CheckStandbySlot).
func (s *starter) checkServers(ctx context.Context) error {
	where := replication.Describe(s.repl)
	if s.record == s.pool {
		return replication.CheckPrimary(ctx, s.pool, where)
	}
	source := replication.Server{Pool: s.pool, Where: where}
	primary := replication.Server{Pool: s.record, Where: replication.Describe(&s.record.Config().ConnConfig.Config)}
	found, err := replication.CheckStandbyRead(ctx, source, primary)
	if err != nil {
		return err
	}
	for _, w := range found.Warnings {
		s.log.Warn().Msg(w)
	}
	if err := replication.CheckStandbySlot(ctx, source, primary, s.cfg.Slot); err != nil {
		return err
	}
	s.standby = true
	s.log.Info().Str("standby", where).Msg("reading from a standby: the slot is there, the relay's record on the primary (--primary-url)")
	return nil
}

// standbySlotLost explains an invalidated slot on the standby with
// Postgres' reason for it.
func (s *starter) standbySlotLost(ctx context.Context, slot replication.SlotInfo) error {
	h, err := replication.ReadSlotHealth(ctx, s.pool, s.cfg.Slot)
	if err != nil {
		return err
	}
	return replication.StandbySlotLost(s.cfg.Slot, slot, h.Invalidated)
}

// slotOptions are the options of the slot the relay creates. On a standby
// the creation waits for a running-transactions record from the primary:
// the relay asks the primary for one every second meanwhile, and logs
// every progressEvery how far the standby's replay is behind.
func (s *starter) slotOptions() replication.SlotOptions {
	opts := replication.SlotOptions{Failover: s.cfg.Failover}
	if s.standby {
		opts.Nudge = s.nudge(s.record)
	}
	return opts
}

// progressEvery is how often a slot creation that waits logs its progress.
const progressEvery = 10 * time.Second

func (s *starter) nudge(primary *pgxpool.Pool) func(context.Context) {
	logs := retry.NewLogLimiter()
	began := time.Now()
	next := began.Add(progressEvery)
	return func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := replication.LogStandbySnapshot(ctx, primary)
		if err == nil {
			s.nudges++
		}
		if err != nil && ctx.Err() == nil && logs.Allow() {
			s.log.Warn().Err(err).Msg("creating the slot on the standby waits for a running-transactions record from the primary, which Postgres writes every 15 s or so; asking for one failed (GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO the relay's role to start faster)")
		}
		if now := time.Now(); now.After(next) {
			next = now.Add(progressEvery)
			s.logReplay(ctx, primary, now.Sub(began))
		}
	}
}

// logReplay logs how far the standby's replay is behind the primary while
// the slot's creation waits for it.
func (s *starter) logReplay(ctx context.Context, primary *pgxpool.Pool, waited time.Duration) {
	r, err := replication.ReadReplay(ctx, s.pool, primary)
	if err != nil {
		s.log.Warn().Err(err).Dur("waited", waited).Msg("creating the slot on the standby: still waiting for the standby to replay a running-transactions record")
		return
	}
	s.log.Warn().Dur("waited", waited).Int64("replay_lag_bytes", r.LagBytes).Str("replay_delay", r.Delay.String()).Str("replay_pause_state", r.PauseState).
		Msg("creating the slot on the standby: still waiting for the standby to replay a running-transactions record (a paused replay or recovery_min_apply_delay holds it up)")
}
