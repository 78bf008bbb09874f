package poll

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the polling relay's own collectors, beside the sink's.
type metrics struct {
	batch    prometheus.Histogram
	rejected prometheus.Counter
	errors   prometheus.Counter
	wakeups  *prometheus.CounterVec
	batches  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_relay_poll_batch_seconds",
			Help:    "Time of a polling batch that published rows: lock, read, publish, wait for PubAcks, commit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_poll_rejected_total",
			Help: "Row attempts the stream could not take as they are; each row is retried with backoff, then dead-lettered.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_poll_errors_total",
			Help: "Polling batches that failed (Postgres errors); they are retried.",
		}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_poll_wakeups_total",
			Help: "Polls started by a NOTIFY or by the fallback interval.",
		}, []string{"reason"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_poll_batches_total",
			Help: "Polling batches run, with rows or without: one after another while batches come back full, else one per NOTIFY or interval.",
		}),
	}
	for _, c := range []prometheus.Collector{m.batch, m.rejected, m.errors, m.wakeups, m.batches} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}
