package jetstream

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// BenchmarkWireMessage measures the relay's own work on each message's
// headers, as Publisher.write does it: the message filled for the event
// (the relay's headers, the source stamp, the row's own headers) and its
// header size checked against the limits. nats.go's encoding of the
// header map (in PublishMsg) comes on top and is not in it. Rerun with
//
//	go test -run '^$' -bench BenchmarkWireMessage -benchmem -cpu 1 -count 5 ./sink/jetstream/
func BenchmarkWireMessage(b *testing.B) {
	stamp := sink.NewStamp(sink.Source{System: "7412345678901234567", Timeline: 1, Slot: "outbox_relay",
		Database: "app", Table: "public.outbox_events"})
	for _, c := range []struct {
		name string
		own  []decode.Header
	}{
		{"relay-headers", nil},
		{"with-row-header", []decode.Header{{Name: "traceparent", Value: rowTraceparent}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			w := newWireMsg().withSource(stamp)
			evs := make([]*decode.Event, 10)
			for i := range evs {
				evs[i] = event(i, []byte(`{"order_id":"ord-1","total":10.99,"lines":[{"sku":"a-1","qty":2}]}`))
				evs[i].CommitTime = time.Now()
				evs[i].Table = "public.outbox_events"
				evs[i].Position.Index = uint32(i)
				evs[i].Headers = c.own
			}
			b.ReportAllocs()
			defer reportCPU(b)()
			n := 0
			for i := 0; b.Loop(); i++ {
				w.fillEvent(evs[i%len(evs)], "outbox.order.created", "_INBOX.abcdefghijklmnopqrstuv.1234.1")
				n += w.headerBytes()
			}
			if n == 0 {
				b.Fatal("no headers")
			}
		})
	}
}
