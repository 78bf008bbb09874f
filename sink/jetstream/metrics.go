package jetstream

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Publisher's Prometheus collectors: the relay's own
// (outbox_relay_*) and the seed article's names (outbox_events_*,
// outbox_batch_duration_seconds), whose meaning is the same whatever reads
// the events (docs/metrics.md):
//
//   - published: the event's PubAck for its own subject arrived;
//   - failed: a publish attempt failed, or the event went to the
//     dead-letter subject;
//   - pending: events the relay knows of and has not stored yet;
//   - batch: one unit of work (a transaction) from when the relay started
//     on it until every event in it was stored.
type Metrics struct {
	Published    prometheus.Counter
	Duplicates   prometheus.Counter
	DeadLettered prometheus.Counter
	Failures     *prometheus.CounterVec
	InFlight     prometheus.Gauge
	AckLatency   prometheus.Histogram

	// EventsPublished is outbox_events_published_total.
	EventsPublished prometheus.Counter
	// EventsFailed is outbox_events_failed_total{event_type}; see
	// failedEventType for the label.
	EventsFailed *prometheus.CounterVec
	// Pending is outbox_events_pending.
	Pending prometheus.Gauge
	// BatchDuration is outbox_batch_duration_seconds (Publisher.EndBatch).
	BatchDuration prometheus.Histogram
	// CommitToStored is the time from a transaction's commit to its
	// event's PubAck.
	CommitToStored prometheus.Histogram
	// Blocked is outbox_relay_stream_blocked{stream,reason}: 1 while the
	// stream has no room for the next event for that reason (RoomReasons).
	Blocked *prometheus.GaugeVec

	// oldest is when the oldest unsettled event committed (or was
	// offered, when its commit time is unknown), in Unix nanoseconds; 0
	// when none is unsettled. Read at scrape time by a GaugeFunc.
	oldest atomic.Int64

	typesMu sync.Mutex
	types   map[string]bool // event_type label values in use
}

// maxEventTypes bounds the event_type label of outbox_events_failed_total:
// its values come from table rows, and a table with ever new event types
// must not grow the relay's memory and the Prometheus server's series
// without bound. Later types are counted under otherEventType.
const (
	maxEventTypes  = 100
	otherEventType = "_other"
)

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
		EventsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_events_published_total",
			Help: "Outbox events stored in the stream on their own subject: PubAck received (duplicate acks included, dead letters not).",
		}),
		EventsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_events_failed_total",
			Help: "Failed publish attempts (each is retried) and events sent to the dead-letter subject, by event type.",
		}, []string{"event_type"}),
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_events_pending",
			Help: "Outbox events the relay knows of and has not stored in the stream yet.",
		}),
		BatchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_batch_duration_seconds",
			Help:    "Duration of each outbox batch (a transaction's events), from when the relay started on it until all its events were stored.",
			Buckets: prometheus.DefBuckets,
		}),
		CommitToStored: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_relay_commit_to_stored_seconds",
			Help:    "Time from the transaction's commit (Postgres clock) to the PubAck of its event (relay clock).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20),
		}),
		Blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_stream_blocked",
			Help: "1 while the stream cannot store the next event for want of room, by reason (max_msgs, max_bytes, max_msgs_per_subject, account_storage, account_memory, server_storage, quorum, store); the relay holds the events and retries.",
		}, []string{"stream", "reason"}),
		types: map[string]bool{},
	}
	oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_oldest_pending_age_seconds",
		Help: "Age of the oldest event not yet stored, from its commit (or from when the relay took it, when its commit time is unknown); 0 when none.",
	}, m.oldestAge)
	// Every reason failureReason returns, created at zero so that rate()
	// and alerts see the series before the first failure.
	for _, r := range []string{"timeout", "disconnected", "no_responders", "stream_full", "rejected", "server_error", "other"} {
		m.Failures.WithLabelValues(r)
	}
	reg.MustRegister(m.Published, m.Duplicates, m.DeadLettered, m.Failures, m.InFlight, m.AckLatency,
		m.EventsPublished, m.EventsFailed, m.Pending, m.BatchDuration, m.CommitToStored, m.Blocked, oldest)
	return m
}

// roomFor creates the stream's outbox_relay_stream_blocked series at 0,
// one per reason, so that alerts and dashboards see them before the first
// block.
func (m *Metrics) roomFor(stream string) {
	for _, r := range RoomReasons() {
		m.Blocked.WithLabelValues(stream, r)
	}
}

// setBlocked marks the stream blocked for reason, and for no other; an
// empty reason clears them all.
func (m *Metrics) setBlocked(stream, reason string) {
	for _, r := range RoomReasons() {
		v := 0.0
		if r == reason {
			v = 1
		}
		m.Blocked.WithLabelValues(stream, r).Set(v)
	}
}

// failed counts one failure of an event of type eventType.
func (m *Metrics) failed(eventType string) {
	m.EventsFailed.WithLabelValues(m.eventTypeLabel(eventType)).Inc()
}

// eventTypeLabel returns the label value for eventType: itself (made valid
// UTF-8: a SQL_ASCII database can hold anything) for the first
// maxEventTypes types seen, otherEventType after.
func (m *Metrics) eventTypeLabel(eventType string) string {
	v := strings.ToValidUTF8(eventType, "\uFFFD")
	m.typesMu.Lock()
	defer m.typesMu.Unlock()
	if m.types[v] {
		return v
	}
	if len(m.types) >= maxEventTypes {
		return otherEventType
	}
	m.types[v] = true
	return v
}

// setOldest records when the oldest unsettled event committed; zero when
// none is unsettled.
func (m *Metrics) setOldest(t time.Time) {
	if t.IsZero() {
		m.oldest.Store(0)
		return
	}
	m.oldest.Store(t.UnixNano())
}

func (m *Metrics) oldestAge() float64 {
	ns := m.oldest.Load()
	if ns == 0 {
		return 0
	}
	// The commit time is Postgres's clock: a relay clock behind it must
	// not show a negative age.
	return max(0, time.Since(time.Unix(0, ns)).Seconds())
}

// sinceCommit returns the seconds from t to now, 0 when the clocks
// disagree.
func sinceCommit(t time.Time) float64 { return max(0, time.Since(t).Seconds()) }
