package inspect

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/jsoncheck"
	"github.com/outbox-relay/outbox-relay/sink"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// TestReportJSON: status --json in the style of docs/json.md, for a zero
// report and a populated one: snake_case, LSNs as text, no zero times,
// not the record's publication fingerprint.
func TestReportJSON(t *testing.T) {
	lag, pending, age := 1.5, int64(2), 3.0
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	full := Report{Slot: "s", Exists: true, ActivePID: 7, ConfirmedFlush: "0/16B3748", LagBytes: 10, FlushLagSeconds: &lag, WALStatus: "reserved",
		InactiveSince: &since, DeadLettersPending: &pending, Stream: "OUTBOX", StreamMessages: 3, StreamLastSeq: 3,
		Record:     &checkpoint.Record{Exists: true, CreatedLSN: 0x16B3748, Limit: 0x16B3750, Bootstrapped: true, Kind: checkpoint.KindInitial, Publication: "fingerprint-123"},
		LastEvent:  &sink.StoredEvent{Seq: 3, Time: since, Subject: "outbox.order.created", ID: "e1", Position: decode.Position{CommitLSN: 0x16B3748, Index: 1}, Source: sink.Source{System: "7", Slot: "s", Origin: 0x10}},
		OtherSlots: []checkpoint.OtherSlot{{Slot: "old", Exists: true, RetainedBytes: 5}},
		Blocked:    &jssink.Blocked{Stream: "OUTBOX", Reason: "stream-max-bytes", What: "full", Fix: "nats stream edit"},
		Poll:       &Pending{Pending: 1, OldestPendingSeconds: &age},
		Problems:   []string{"p"}}
	for name, r := range map[string]Report{"zero": {}, "zero record and event": {Record: &checkpoint.Record{}, LastEvent: &sink.StoredEvent{}}, "populated": full} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if p := jsoncheck.Check(b); p != nil {
			t.Errorf("%s report: %v\n%s", name, p, b)
		}
		if strings.Contains(string(b), "fingerprint") {
			t.Errorf("%s report shows the publication fingerprint:\n%s", name, b)
		}
	}
	b, _ := json.Marshal(full)
	for _, want := range []string{`"created_lsn":"0/16B3748"`, `"commit_lsn":"0/16B3748"`, `"id":"e1"`, `"initial_rows_published":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("status --json lacks %s:\n%s", want, b)
		}
	}
}
