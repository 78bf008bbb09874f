package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// deadLetterEvery is how often the dead-letter count is read.
const deadLetterEvery = 15 * time.Second

// deadLetterGauge keeps outbox_relay_dead_letters, the dead letters listed
// in Postgres and not retried, up to date. It is read from the table
// rather than counted by the process, so it survives restarts, drops when
// an operator retries them, and agrees across relays sharing the table.
type deadLetterGauge struct {
	store *checkpoint.Store
	every time.Duration
	gauge prometheus.Gauge
	log   zerolog.Logger
}

func newDeadLetterGauge(reg prometheus.Registerer, store *checkpoint.Store, every time.Duration, log zerolog.Logger) (*deadLetterGauge, error) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_relay_dead_letters",
		Help: "Dead letters listed in outbox_relay_dead_letters and not retried yet (outbox-relay dlq list), read every " + every.String() + ".",
	})
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return &deadLetterGauge{store: store, every: every, gauge: g, log: log}, nil
}

// Run samples the count until ctx ends.
func (d *deadLetterGauge) Run(ctx context.Context) error {
	tick := time.NewTicker(d.every)
	defer tick.Stop()
	logs := retry.NewLogLimiter()
	for {
		if err := d.Sample(ctx); err != nil && ctx.Err() == nil && logs.Allow() {
			d.log.Warn().Err(err).Msg("cannot read the dead-letter count for metrics")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Sample reads the count once.
func (d *deadLetterGauge) Sample(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := d.store.DeadLettersNotRetried(qctx)
	if err != nil {
		return err
	}
	d.gauge.Set(float64(n))
	return nil
}
