package bench

import (
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// TestShapesKeepWhatIsReadBack: the leaner shapes keep every header the
// resume logic reads (ParseStored gives the same event, source and
// position as from the relay's full set), and "needed" also every one
// the consumer reads.
func TestShapesKeepWhatIsReadBack(t *testing.T) {
	stored := func(s msgShape) *natsjs.RawStreamMsg {
		m := s.msg(7, 250, "bench.order.created")
		return &natsjs.RawStreamMsg{Subject: m.Subject, Sequence: 1, Header: m.Header, Data: m.Data}
	}
	shapes := msgShapes()
	full := stored(shapes[0])
	want, ok := jssink.ParseStored(full)
	if !ok || want.Source.Table == "" || want.Source.Database == "" || want.Source.Origin == 0 {
		t.Fatalf("the full shape does not carry a whole source: %+v (%v)", want, ok)
	}
	for _, s := range shapes[1:3] {
		got, ok := jssink.ParseStored(stored(s))
		if !ok || got.ID != want.ID || got.Position != want.Position || got.Source != want.Source {
			t.Errorf("%s: ParseStored reads %+v (%v), want the position and source of %+v", s.key, got, ok, want)
		}
	}
	needed := stored(shapes[1])
	for _, name := range []string{contract.HeaderMsgID, contract.HeaderAggregateType, contract.HeaderAggregateID, contract.HeaderEventType} {
		if needed.Header.Get(name) != full.Header.Get(name) {
			t.Errorf("needed: %s is %q, the relay sends %q", name, needed.Header.Get(name), full.Header.Get(name))
		}
	}
	if len(needed.Header) >= len(full.Header) {
		t.Errorf("needed keeps %d headers of %d: it is not leaner", len(needed.Header), len(full.Header))
	}
	if id := stored(shapes[3]); len(id.Header) != 1 || id.Header.Get(contract.HeaderMsgID) == "" {
		t.Errorf("id: headers %v", id.Header)
	}
}
