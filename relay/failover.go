package relay

import (
	"context"
	"errors"

	"github.com/outbox-relay/outbox-relay/replication"
)

// checkFailover refuses --failover where failover slots do not exist
// (before Postgres 17, on a standby) and warns when the server lets
// logical walsenders run ahead of its physical standbys.
//
// Without synchronized_standby_slots the relay may receive, publish and
// confirm events whose WAL no standby has yet. After a promotion they are
// in the stream but not in the new primary's table, and the synced slot
// is older than the relay's confirmations: the relay stops there with a
// gap error rather than going on from a slot it cannot trust.
func (s *starter) checkFailover(ctx context.Context) error {
	if err := replication.CheckFailover(ctx, s.pool); err != nil {
		return err
	}
	standbys, err := replication.StandbySlots(ctx, s.pool)
	if err != nil {
		return err
	}
	if standbys == "" {
		s.log.Warn().Str("slot", s.cfg.Slot).
			Msg("--failover: synchronized_standby_slots is empty on the primary, so the relay may publish events no standby has received yet, which a promoted standby would not have: set it to the physical slots of the standbys that sync slots (ALTER SYSTEM SET synchronized_standby_slots = 'standby_slot'; SELECT pg_reload_conf())")
	}
	return nil
}

// ensureFailover makes an existing slot a failover slot. The operator
// asked for one by --failover, and the slot is not streamed yet (the
// take-up lock is held, or a session is about to start), so turning it on
// here (ALTER_REPLICATION_SLOT, idempotent) does what the operator would
// otherwise have to do by hand before every first start with --failover.
// A slot another instance streams from is reported (warn) and left alone:
// the replication session that takes it over makes it a failover slot on
// its own connection before it streams (replication.Config.Failover).
func (s *starter) ensureFailover(ctx context.Context, warn bool) error {
	on, active, err := replication.SlotFailover(ctx, s.pool, s.cfg.Slot)
	if err != nil || on {
		return err
	}
	if active {
		err = replication.ErrSlotInUse
	} else {
		err = replication.EnableFailover(ctx, s.repl, s.cfg.Slot)
	}
	if errors.Is(err, replication.ErrSlotInUse) {
		// Another instance streams from it; this one waits as its standby
		// and makes the slot a failover slot when it takes over.
		if warn {
			s.log.Warn().Err(err).Str("slot", s.cfg.Slot).Msg("--failover: the slot is not a failover slot and another process streams from it; this relay makes it one when it takes the slot over")
		}
		return nil
	}
	if err != nil {
		return err
	}
	s.log.Warn().Str("slot", s.cfg.Slot).Msg("--failover: the existing slot was not a failover slot; made it one (ALTER_REPLICATION_SLOT ... (FAILOVER true)): standbys with sync_replication_slots = on copy it from now on")
	return nil
}
