package relay

import (
	"context"

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

// noteFailover says so at start when the slot is not a failover slot yet
// and another instance streams from it: this one waits as its standby. The
// replication session that gets the slot makes it a failover slot, on its
// own connection before it streams (replication.Config.Failover), so an
// existing slot is altered in one place whether it is free or taken over.
func (s *starter) noteFailover(ctx context.Context) error {
	on, active, err := replication.SlotFailover(ctx, s.pool, s.cfg.Slot)
	if err == nil && !on && active {
		s.log.Warn().Str("slot", s.cfg.Slot).Msg("--failover: the slot is not a failover slot and another process streams from it; this relay makes it one when it takes the slot over")
	}
	return err
}
