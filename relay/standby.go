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
// database must accept writes; with it, see replication.CheckStandbyRead.
func (s *starter) checkServers(ctx context.Context) error {
	where := replication.Describe(s.repl)
	if s.record == s.pool {
		return replication.CheckPrimary(ctx, s.pool, where)
	}
	standby, err := replication.CheckStandbyRead(ctx,
		replication.Server{Pool: s.pool, Where: where},
		replication.Server{Pool: s.record, Where: replication.Describe(&s.record.Config().ConnConfig.Config)})
	if err != nil {
		return err
	}
	s.standby = standby
	if standby {
		s.log.Info().Str("standby", where).Msg("reading from a standby: the slot is there, the relay's record on the primary (--primary-url)")
	}
	return nil
}

// slotOptions are the options of the slot the relay creates. On a standby
// the creation waits for a running-transactions record from the primary:
// the relay asks the primary for one every second meanwhile.
func (s *starter) slotOptions() replication.SlotOptions {
	opts := replication.SlotOptions{Failover: s.cfg.Failover}
	if s.standby {
		opts.Nudge = s.nudge(s.record)
	}
	return opts
}

func (s *starter) nudge(primary *pgxpool.Pool) func(context.Context) {
	logs := retry.NewLogLimiter()
	return func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := replication.LogStandbySnapshot(ctx, primary)
		if err != nil && ctx.Err() == nil && logs.Allow() {
			s.log.Warn().Err(err).Msg("creating the slot on the standby waits for a running-transactions record from the primary, which Postgres writes every 15 s or so; asking for one failed (GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO the relay's role to start faster)")
		}
	}
}
