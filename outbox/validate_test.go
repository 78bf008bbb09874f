package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// refusingTx fails the test if anything reaches it: refused input must be
// refused before a statement is sent.
type refusingTx struct{ t *testing.T }

func (r refusingTx) Query(context.Context, string, ...any) (pgx.Rows, error) {
	r.t.Fatal("a statement was sent for refused input")
	return nil, nil
}

func valid() outbox.Event {
	return outbox.Event{AggregateType: "order", AggregateID: "42", EventType: "order.created", Payload: json.RawMessage(`{"total": 10}`)}
}

func TestRefusedBeforeInsert(t *testing.T) {
	with := func(f func(*outbox.Event)) outbox.Event { ev := valid(); f(&ev); return ev }
	big := `{"data": "` + strings.Repeat("x", outbox.DefaultMaxPayload) + `"}`
	cases := []struct {
		name  string
		ev    outbox.Event
		want  error
		about string // part of the message
	}{
		{"empty aggregate type", with(func(e *outbox.Event) { e.AggregateType = "" }), outbox.ErrInvalidEvent, "aggregate_type is empty"},
		{"empty aggregate id", with(func(e *outbox.Event) { e.AggregateID = "" }), outbox.ErrInvalidEvent, "aggregate_id is empty"},
		{"empty event type", with(func(e *outbox.Event) { e.EventType = "" }), outbox.ErrInvalidEvent, "event_type is empty"},
		{"type too long", with(func(e *outbox.Event) { e.EventType = strings.Repeat("é", 101) }), outbox.ErrInvalidEvent, "101 characters"},
		{"NUL in id", with(func(e *outbox.Event) { e.AggregateID = "4\x002" }), outbox.ErrInvalidEvent, "NUL"},
		{"id not UTF-8", with(func(e *outbox.Event) { e.AggregateID = "\xff" }), outbox.ErrInvalidEvent, "UTF-8"},
		{"nil payload", with(func(e *outbox.Event) { e.Payload = nil }), outbox.ErrInvalidPayload, "is nil"},
		{"empty bytes", with(func(e *outbox.Event) { e.Payload = []byte{} }), outbox.ErrInvalidPayload, "empty"},
		{"not JSON", with(func(e *outbox.Event) { e.Payload = []byte(`{"a":}`) }), outbox.ErrInvalidPayload, "not JSON"},
		{"raw message not JSON", with(func(e *outbox.Event) { e.Payload = json.RawMessage(`order`) }), outbox.ErrInvalidPayload, "not JSON"},
		{"trailing garbage", with(func(e *outbox.Event) { e.Payload = []byte(`{} {}`) }), outbox.ErrInvalidPayload, "not JSON"},
		{"invalid UTF-8", with(func(e *outbox.Event) { e.Payload = []byte("\"\xff\"") }), outbox.ErrInvalidPayload, "UTF-8"},
		{"escaped NUL", with(func(e *outbox.Event) { e.Payload = []byte(`{"a": "x\u0000"}`) }), outbox.ErrInvalidPayload, `\u0000`},
		{"marshaled NUL", with(func(e *outbox.Event) { e.Payload = map[string]string{"a": "x\x00"} }), outbox.ErrInvalidPayload, `\u0000`},
		{"lone high surrogate", with(func(e *outbox.Event) { e.Payload = []byte(`"\ud800"`) }), outbox.ErrInvalidPayload, "high surrogate"},
		{"lone low surrogate", with(func(e *outbox.Event) { e.Payload = []byte(`"\udc00x"`) }), outbox.ErrInvalidPayload, "low surrogate"},
		{"numeric overflow", with(func(e *outbox.Event) { e.Payload = []byte(`[1e131072]`) }), outbox.ErrInvalidPayload, "numeric"},
		{"numeric scale", with(func(e *outbox.Event) { e.Payload = []byte(`1e-16384`) }), outbox.ErrInvalidPayload, "numeric"},
		{"cannot marshal", with(func(e *outbox.Event) { e.Payload = math.NaN() }), outbox.ErrInvalidPayload, "cannot be encoded"},
		{"too large", with(func(e *outbox.Event) { e.Payload = []byte(big) }), outbox.ErrPayloadTooLarge, "as published"},
		{"reserved header", with(func(e *outbox.Event) { e.Headers = map[string]string{"Nats-Msg-Id": "x"} }), outbox.ErrInvalidEvent, "reserved"},
		{"relay's header", with(func(e *outbox.Event) { e.Headers = map[string]string{"outbox-event-type": "x"} }), outbox.ErrInvalidEvent, "reserved"},
		{"header name with a space", with(func(e *outbox.Event) { e.Headers = map[string]string{"trace parent": "x"} }), outbox.ErrInvalidEvent, "not allowed"},
		{"header value with NUL", with(func(e *outbox.Event) { e.Headers = map[string]string{"traceparent": "a\x00"} }), outbox.ErrInvalidEvent, "NUL"},
		{"too many headers", with(func(e *outbox.Event) { e.Headers = manyHeaders(33) }), outbox.ErrInvalidEvent, "33 headers"},
		{"headers make it too large", with(func(e *outbox.Event) {
			e.Payload = []byte(`{"data": "` + strings.Repeat("x", outbox.DefaultMaxPayload-3000) + `"}`)
			e.Headers = map[string]string{"baggage": strings.Repeat("b", 1000)}
		}), outbox.ErrPayloadTooLarge, "as published"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The bad event is the second: the first is fine and must not be sent either.
			_, err := outbox.Write(context.Background(), refusingTx{t}, valid(), c.ev)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.about) || !strings.Contains(err.Error(), "outbox event 1") {
				t.Fatalf("error %q should name event 1 and say %q", err, c.about)
			}
			_, err = outbox.WriteSQL(context.Background(), nil, valid(), c.ev)
			if !errors.Is(err, c.want) {
				t.Fatalf("WriteSQL: got %v, want %v", err, c.want)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	for _, name := range []string{"", "Outbox", "public.outbox-events", "a.b.c", `x"; DROP TABLE y; --`} {
		if _, err := outbox.NewWriter(outbox.WithTable(name)); err == nil {
			t.Errorf("WithTable(%q) accepted", name)
		}
	}
	if _, err := outbox.NewWriter(outbox.WithMaxPayload(1000)); err == nil {
		t.Error("WithMaxPayload(1000) accepted: no room for the relay's headers")
	}
	w, err := outbox.NewWriter(outbox.WithTable("shop_events"))
	if err != nil || w.Table().String() != "public.shop_events" {
		t.Fatalf("WithTable(shop_events): %v %v", w, err)
	}
}

func TestArrayLiteral(t *testing.T) {
	got := outbox.ArrayLiteral([]string{"a", "", `q"uo\te`, "NULL", " {x,y} "})
	want := `{"a","","q\"uo\\te","NULL"," {x,y} "}`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func manyHeaders(n int) map[string]string {
	hs := map[string]string{}
	for i := 0; i < n; i++ {
		hs[fmt.Sprint("x-h", i)] = "v"
	}
	return hs
}
