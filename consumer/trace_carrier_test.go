package consumer

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestHeaderCarrierReadsCloudEventsTrace: the CloudEvents form carries the
// trace in ce-traceparent, percent-encoded; a plain traceparent wins.
func TestHeaderCarrierReadsCloudEventsTrace(t *testing.T) {
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ce := headerCarrier(nats.Header{"ce-traceparent": {tp}, "ce-tracestate": {"k=v%2Cw"}})
	if got := ce.Get("traceparent"); got != tp {
		t.Errorf("traceparent from ce-traceparent: %q, want %q", got, tp)
	}
	if got := ce.Get("tracestate"); got != "k=v,w" {
		t.Errorf("tracestate from ce-tracestate: %q, want it decoded", got)
	}
	plain := headerCarrier(nats.Header{"Traceparent": {"plain"}, "ce-traceparent": {tp}})
	if got := plain.Get("traceparent"); got != "plain" {
		t.Errorf("a plain traceparent beside ce-traceparent: got %q", got)
	}
}
