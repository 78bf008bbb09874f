package replication

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// Monitor reports the slot's health as metrics: lag in bytes, the WAL it
// retains and how much more may be written before it risks invalidation,
// whether it is active, its wal_status. It also warns when the slot nears
// invalidation, before events can be lost.
type Monitor struct {
	pool     *pgxpool.Pool
	slot     string
	every    time.Duration
	log      zerolog.Logger
	metrics  *Metrics
	statuses []string
}

// NewMonitor returns a Monitor that looks at slot every interval.
func NewMonitor(pool *pgxpool.Pool, slot string, every time.Duration, log zerolog.Logger, metrics *Metrics) *Monitor {
	return &Monitor{pool: pool, slot: slot, every: every, log: log, metrics: metrics,
		statuses: []string{"reserved", "extended", "unreserved", "lost"}}
}

// Run samples the slot until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	tick := time.NewTicker(m.every)
	defer tick.Stop()
	logs := retry.NewLogLimiter()
	for {
		if err := m.Sample(ctx); err != nil && ctx.Err() == nil && logs.Allow() {
			m.log.Warn().Err(err).Str("slot", m.slot).Msg("cannot read the slot's state for metrics")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Sample reads the slot once and updates the metrics.
func (m *Monitor) Sample(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := LookupSlot(qctx, m.pool, m.slot)
	if err != nil {
		return err
	}
	active := 0.0
	if info.Active {
		active = 1
	}
	m.metrics.SlotActive.Set(active)
	m.metrics.SlotLagBytes.Set(float64(info.LagBytes))
	m.metrics.RetainedWAL.Set(float64(info.RetainedBytes))
	if info.SafeWALSize != nil {
		m.metrics.SafeWALSize.WithLabelValues().Set(float64(*info.SafeWALSize))
	} else {
		m.metrics.SafeWALSize.Reset()
	}
	for _, s := range m.statuses {
		v := 0.0
		if s == info.WALStatus {
			v = 1
		}
		m.metrics.WALStatus.WithLabelValues(s).Set(v)
	}
	if info.WALStatus == "unreserved" {
		m.log.Error().Str("slot", m.slot).Int64("lag_bytes", info.LagBytes).
			Msg("slot is about to be invalidated (wal_status unreserved, past max_slot_wal_keep_size): events will be lost unless the relay catches up")
	}
	return nil
}
