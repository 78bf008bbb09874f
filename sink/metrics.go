package sink

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the Publisher's Prometheus collectors.
type Metrics struct {
	Published    prometheus.Counter
	Duplicates   prometheus.Counter
	DeadLettered prometheus.Counter
	Failures     *prometheus.CounterVec
	InFlight     prometheus.Gauge
	AckLatency   prometheus.Histogram
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_events_published_total",
			Help: "Events stored in the stream (PubAck received).",
		}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_duplicate_acks_total",
			Help: "Publishes JetStream acknowledged as duplicates of a stored Nats-Msg-Id (a replay after a restart or an outage).",
		}),
		DeadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_events_dead_lettered_total",
			Help: "Events sent to the dead-letter subject because they can never be published as they are.",
		}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_publish_failures_total",
			Help: "Failed publish attempts, by reason; each is retried in order.",
		}, []string{"reason"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_publish_in_flight",
			Help: "Events handed to the publisher and not yet acknowledged.",
		}),
		AckLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_relay_publish_ack_seconds",
			Help:    "Time from writing a message to receiving its PubAck.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
		}),
	}
	reg.MustRegister(m.Published, m.Duplicates, m.DeadLettered, m.Failures, m.InFlight, m.AckLatency)
	return m
}
