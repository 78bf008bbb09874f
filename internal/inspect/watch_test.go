package inspect

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink"
)

// TestSampleRate: the rate is the stream's sequence per second between
// two samples, and cannot be told without a sample before, with the
// stream unread, or with its sequence gone back (a stream recreated).
func TestSampleRate(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	prev := Sample{At: at, Report: Report{StreamLastSeq: 100}}
	cur := Sample{At: at.Add(2 * time.Second), Report: Report{StreamLastSeq: 120}}
	if per, ok := cur.Rate(prev); !ok || per != 10 {
		t.Errorf("Rate = %v, %v; want 10, true", per, ok)
	}
	unread := cur
	unread.Report.StreamError = "not connected to NATS"
	back := cur
	back.Report.StreamLastSeq = 5
	for name, c := range map[string][2]Sample{
		"first sample":    {cur, {}},
		"stream unread":   {unread, prev},
		"unread before":   {cur, unread},
		"sequence behind": {back, prev},
	} {
		if per, ok := c[0].Rate(c[1]); ok {
			t.Errorf("%s: Rate = %v, true; want it untold", name, per)
		}
	}
}

// TestSampleFields: the figures of a sample in display order, for a slot
// that streams, a slot missing, a polling relay and Postgres unreadable.
func TestSampleFields(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	flush, dead, oldest := 0.25, int64(2), 1.5
	prev := Sample{At: at, Report: Report{StreamLastSeq: 100}}
	for _, c := range []struct {
		name string
		s    Sample
		want [][2]string
	}{{
		name: "active slot",
		s: Sample{At: at.Add(time.Second), Report: Report{Exists: true, Active: true, ActivePID: 7, WALStatus: "reserved",
			LagBytes: 2048, FlushLagSeconds: &flush, StreamLastSeq: 105, DeadLettersPending: &dead,
			LastEvent: &sink.StoredEvent{Seq: 105, ID: "ev-5", Time: at.Add(-1500 * time.Millisecond)}}},
		want: [][2]string{{"slot", "active pid 7, wal_status reserved"}, {"lag", "2.0 KiB (2048 bytes)"}, {"flush lag", "0.250s"},
			{"rate", "5.0 msg/s"}, {"last event", "2.5s ago (ev-5, seq 105)"}, {"dead letters", "2 not retried"}},
	}, {
		name: "slot missing",
		s:    Sample{At: at.Add(time.Second), Report: Report{StreamError: "stream not found", Problems: []string{"a", "b"}}},
		want: [][2]string{{"slot", "missing"}, {"rate", "-"}, {"stream", "stream not found"}, {"problems", "a; b"}},
	}, {
		name: "inactive slot without flush lag",
		s:    Sample{At: at.Add(time.Second), Report: Report{Exists: true, WALStatus: "extended", StreamLastSeq: 100}},
		want: [][2]string{{"slot", "INACTIVE, wal_status extended"}, {"lag", "0 B (0 bytes)"}, {"flush lag", "-"},
			{"rate", "0.0 msg/s"}, {"last event", "none"}},
	}, {
		name: "polling",
		s:    Sample{At: at.Add(time.Second), Report: Report{Poll: &Pending{Pending: 3, OldestPendingSeconds: &oldest}, StreamLastSeq: 100}},
		want: [][2]string{{"pending", "3 rows, oldest 1.5s, 0 waiting for a retry"}, {"rate", "0.0 msg/s"}, {"last event", "none"}},
	}, {
		name: "postgres unreadable",
		s:    Sample{At: at.Add(time.Second), Err: errors.New("connection refused"), Report: Report{Exists: true, StreamLastSeq: 100}},
		want: [][2]string{{"postgres", "connection refused"}, {"rate", "0.0 msg/s"}, {"last event", "none"}},
	}} {
		if got := c.s.Fields(prev); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Fields =\n%q\nwant\n%q", c.name, got, c.want)
		}
	}
}
