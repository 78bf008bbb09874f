package jetstream

import (
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/decode"
)

// TestArticleMetrics: while PubAcks are held back, the offered events are
// pending and the oldest one's age runs from its commit; once they are
// stored, the published and failed counters, the batch durations and the
// commit-to-stored latencies account for each event and batch exactly.
func TestArticleMetrics(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	p := e.publisher(t, Config{Stream: e.stream})
	gate := gateReplies(t, p, gateHold)
	run(t, p)
	m := p.metrics

	const age = 2 * time.Second
	committed := time.Now().Add(-age)
	batchStart := time.Now()
	offer := func(ev *decode.Event) {
		t.Helper()
		ev.CommitTime = committed
		if _, ok := p.Offer(ev); !ok {
			t.Fatal("no room in an empty window")
		}
	}
	offer(event(1, nil))
	offer(event(2, nil))
	p.EndBatch(batchStart) // batch 1: events 1 and 2
	dead := event(3, nil)
	dead.EventType, dead.Problem = "broken", "payload is NULL"
	offer(dead)
	p.EndBatch(batchStart) // batch 2: the dead letter

	waitFor(t, 5*time.Second, "the three PubAcks held back", func() bool { return gate.heldCount() == 3 })
	if got := testutil.ToFloat64(m.Pending); got != 3 {
		t.Errorf("outbox_events_pending = %v with 3 events unacknowledged", got)
	}
	if got := m.oldestAge(); got < age.Seconds() || got > age.Seconds()+30 {
		t.Errorf("oldest pending age = %vs, want about %v", got, age)
	}
	if got := histogramCount(t, m.BatchDuration); got != 0 {
		t.Errorf("%d batches observed before any PubAck", got)
	}

	gate.open()
	drain(t, p, 5*time.Second)
	for name, c := range map[string]struct {
		got, want float64
	}{
		"outbox_events_pending":                            {testutil.ToFloat64(m.Pending), 0},
		"outbox_relay_oldest_pending_age_seconds":          {m.oldestAge(), 0},
		"outbox_events_published_total":                    {testutil.ToFloat64(m.EventsPublished), 2},
		`outbox_events_failed_total{event_type="broken"}`:  {testutil.ToFloat64(m.EventsFailed.WithLabelValues("broken")), 1},
		`outbox_events_failed_total{event_type="created"}`: {testutil.ToFloat64(m.EventsFailed.WithLabelValues("created")), 0},
		"outbox_batch_duration_seconds count":              {float64(histogramCount(t, m.BatchDuration)), 2},
		"outbox_relay_commit_to_stored_seconds count":      {float64(histogramCount(t, m.CommitToStored)), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	if sum := histogramSum(t, m.CommitToStored); sum < 2*age.Seconds() {
		t.Errorf("commit-to-stored sum %vs for 2 events committed %v ago", sum, age)
	}

	// A batch that ends after all its events are stored is observed at once.
	offer(event(4, nil))
	drain(t, p, 5*time.Second)
	p.EndBatch(batchStart)
	if got := histogramCount(t, m.BatchDuration); got != 3 {
		t.Errorf("batch ended after its events were stored: %d batches observed, want 3", got)
	}
}

// The event_type label keeps the row's value, made valid UTF-8, for a
// bounded number of types; later ones share one value.
func TestEventTypeLabelBounded(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	if got := m.eventTypeLabel("bad\xffutf8"); got != "bad\uFFFDutf8" {
		t.Errorf("invalid UTF-8 label = %q", got)
	}
	m.failed("bad\xffutf8") // WithLabelValues panics on invalid UTF-8
	for i := len(m.types); i < maxEventTypes; i++ {
		m.failed(fmt.Sprintf("type-%d", i))
	}
	if got := m.eventTypeLabel("one-too-many"); got != otherEventType {
		t.Errorf("type beyond the bound labelled %q, want %q", got, otherEventType)
	}
	if got := m.eventTypeLabel("type-7"); got != "type-7" {
		t.Errorf("known type labelled %q", got)
	}
	if n := testutil.CollectAndCount(m.EventsFailed); n != maxEventTypes {
		t.Errorf("%d event_type series, want %d", n, maxEventTypes)
	}
}

func histogramMetric(t *testing.T, h prometheus.Histogram) *dto.Histogram {
	t.Helper()
	var out dto.Metric
	if err := h.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram()
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	return histogramMetric(t, h).GetSampleCount()
}

func histogramSum(t *testing.T, h prometheus.Histogram) float64 {
	t.Helper()
	return histogramMetric(t, h).GetSampleSum()
}
