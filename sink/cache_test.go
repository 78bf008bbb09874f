package sink

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/outbox-relay/outbox-relay/decode"
)

// TestSubjectCache: the cache renders what the template renders, also
// after the event's buffer is reused, and stays bounded.
func TestSubjectCache(t *testing.T) {
	for _, src := range []string{"outbox.{aggregate_type}.{event_type}", "outbox.{aggregate_type}.{aggregate_id}"} {
		tpl, err := ParseTemplate(src)
		if err != nil {
			t.Fatal(err)
		}
		c := NewSubjectCache(tpl)
		buf := []byte("order.created")
		for i := 0; i < 3*maxCached; i++ {
			// The event's strings view a buffer that the next event reuses,
			// as the decoder's arena does.
			copy(buf, fmt.Sprintf("o%04d.created", i%(2*maxCached))[:len(buf)])
			ev := &decode.Event{AggregateType: unsafe.String(&buf[0], 5), EventType: unsafe.String(&buf[6], len(buf)-6), AggregateID: fmt.Sprint(i)}
			if got, want := c.Render(ev), tpl.Render(ev); got != want {
				t.Fatalf("%s: event %d: cached %q, rendered %q", src, i, got, want)
			}
		}
		if len(c.m) > maxCached {
			t.Errorf("%s: %d cached subjects, bound %d", src, len(c.m), maxCached)
		}
		if tpl.usesAggregateID && len(c.m) != 0 {
			t.Errorf("%s: cached %d subjects keyed by aggregate id", src, len(c.m))
		}
	}
}
