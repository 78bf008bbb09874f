package inspect

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/doctor"
)

// Sample is one look at the slot and the stream: what `status --watch`
// shows at each interval.
type Sample struct {
	At     time.Time
	Report Report
	Err    error // Postgres could not be read
}

// TakeSample collects a Sample, giving Collect at most timeout. NATS or
// Postgres being unreachable is in the sample, not returned.
func TakeSample(ctx context.Context, pool *pgxpool.Pool, nc *nats.Conn, o Options, timeout time.Duration) Sample {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := Collect(sctx, pool, nc, o)
	return Sample{At: time.Now(), Report: r, Err: err}
}

// Rate is the stream's messages per second between prev and s; ok is
// false when it cannot be told (no previous sample, the stream unread or
// its sequence gone back).
func (s Sample) Rate(prev Sample) (perSec float64, ok bool) {
	if prev.At.IsZero() || s.Report.StreamLastSeq < prev.Report.StreamLastSeq || s.Report.StreamError != "" || prev.Report.StreamError != "" {
		return 0, false
	}
	return float64(s.Report.StreamLastSeq-prev.Report.StreamLastSeq) / s.At.Sub(prev.At).Seconds(), true
}

// Fields are the sample's figures as name, value pairs, in display order;
// prev, the sample before, gives the rate. Drawing them is the CLI's.
func (s Sample) Fields(prev Sample) [][2]string {
	r := s.Report
	var f [][2]string
	add := func(k, format string, args ...any) { f = append(f, [2]string{k, fmt.Sprintf(format, args...)}) }
	if s.Err != nil {
		add("postgres", "%v", s.Err)
	}
	switch {
	case s.Err != nil:
	case r.Poll != nil:
		add("pending", "%s", r.Poll.Line())
	case !r.Exists:
		add("slot", "missing")
	case r.Active:
		add("slot", "active pid %d, wal_status %s", r.ActivePID, r.WALStatus)
	default:
		add("slot", "INACTIVE, wal_status %s", r.WALStatus)
	}
	if s.Err == nil && r.Exists {
		add("lag", "%s (%d bytes)", doctor.HumanBytes(r.LagBytes), r.LagBytes)
		if r.FlushLagSeconds != nil {
			add("flush lag", "%.3fs", *r.FlushLagSeconds)
		} else {
			add("flush lag", "-")
		}
	}
	if per, ok := s.Rate(prev); ok {
		add("rate", "%.1f msg/s", per)
	} else {
		add("rate", "-")
	}
	switch {
	case r.StreamError != "":
		add("stream", "%s", r.StreamError)
	case r.LastEvent != nil:
		add("last event", "%s ago (%s, seq %d)", s.At.Sub(r.LastEvent.Time).Round(100*time.Millisecond), r.LastEvent.ID, r.LastEvent.Seq)
	default:
		add("last event", "none")
	}
	if r.DeadLettersPending != nil {
		add("dead letters", "%d not retried", *r.DeadLettersPending)
	}
	if len(r.Problems) > 0 {
		add("problems", "%s", strings.Join(r.Problems, "; "))
	}
	return f
}
