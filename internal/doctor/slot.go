package doctor

import (
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/replication"
)

// SlotLimits are the thresholds `status` holds the slot to; a zero limit
// is not checked.
type SlotLimits struct {
	// MaxLagBytes: WAL the slot holds that the relay has not confirmed.
	MaxLagBytes int64
	// MaxLagAge: the walsender's flush lag (replication.SlotHealth).
	MaxLagAge time.Duration
	// FailInactive makes an inactive slot a problem; after MaxInactive of
	// inactivity only, where Postgres shows since when (17+).
	FailInactive bool
	MaxInactive  time.Duration
}

// SlotProblems returns what is wrong with the slot at now: missing, lost or
// invalidated, about to be lost, and each limit exceeded.
func (l SlotLimits) SlotProblems(name string, s replication.SlotInfo, h replication.SlotHealth, now time.Time) []string {
	if !s.Exists {
		return []string{fmt.Sprintf("slot %q does not exist: start the relay (it creates the slot), or repair a lost one with run --recreate-slot", name)}
	}
	var out []string
	switch {
	case s.WALStatus == "lost" || h.Invalidated != "":
		why := h.Invalidated
		if why == "" {
			why = "wal_status lost"
		}
		out = append(out, fmt.Sprintf("slot %q was invalidated (%s): %s", name, why, repairAdvice))
	case s.WALStatus == "unreserved":
		out = append(out, fmt.Sprintf("slot %q is about to be invalidated (wal_status unreserved): start the relay or raise max_slot_wal_keep_size", name))
	}
	if l.FailInactive && !s.Active {
		switch {
		case l.MaxInactive <= 0:
			out = append(out, fmt.Sprintf("slot %q is inactive: no relay streams from it", name))
		case h.InactiveSince.IsZero():
			out = append(out, fmt.Sprintf("slot %q is inactive (this Postgres does not say since when: before 17, --max-inactive cannot wait)", name))
		case now.Sub(h.InactiveSince) > l.MaxInactive:
			out = append(out, fmt.Sprintf("slot %q has been inactive for %s (--max-inactive %s)", name, now.Sub(h.InactiveSince).Round(time.Second), l.MaxInactive))
		}
	}
	if l.MaxLagBytes > 0 && s.LagBytes > l.MaxLagBytes {
		out = append(out, fmt.Sprintf("slot %q lags %s (%d bytes), more than --max-lag-bytes %s", name, HumanBytes(s.LagBytes), s.LagBytes, contract.ByteSize(l.MaxLagBytes)))
	}
	if l.MaxLagAge > 0 && h.HasFlushLag && h.FlushLag > l.MaxLagAge {
		out = append(out, fmt.Sprintf("the relay confirms WAL %s after it is written, more than --max-lag-age %s", h.FlushLag.Round(time.Millisecond), l.MaxLagAge))
	}
	return out
}
