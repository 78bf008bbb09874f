package decode

import (
	"reflect"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/contract"
)

func TestParseHeaders(t *testing.T) {
	many := "{"
	for i := 0; i <= contract.MaxHeaders; i++ {
		if i > 0 {
			many += ","
		}
		many += `"h` + strings.Repeat("x", i) + `": "v"`
	}
	many += "}"
	cases := []struct {
		in      string
		want    []Header
		problem string // part of the error; "" for none
	}{
		{in: `null`},
		{in: `{}`},
		{in: `{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "congo=t61rcWkgMzE"}`,
			want: []Header{{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, {"tracestate", "congo=t61rcWkgMzE"}}},
		{in: `{"X-Odd": " spaced\r\n"}`, want: []Header{{"X-Odd", " spaced\r\n"}}},
		{in: `[1, 2]`, problem: "not a JSON object"},
		{in: `"traceparent"`, problem: "not a JSON object"},
		{in: `{"n": 1}`, problem: `header "n": the value must be a JSON string`},
		{in: `{"n": ["a"]}`, problem: "must be a JSON string"},
		{in: `{"n": null}`, problem: "must be a JSON string"},
		{in: `{"Nats-Msg-Id": "x"}`, problem: "reserved"},
		{in: `{"nats-expected-stream": "x"}`, problem: "reserved"},
		{in: `{"OUTBOX-Event-Type": "x"}`, problem: "reserved"},
		{in: `{"a b": "x"}`, problem: `' ' is not allowed`},
		{in: `{"a:b": "x"}`, problem: `':' is not allowed`},
		{in: `{"": "x"}`, problem: "want 1 to 128 characters"},
		{in: `{"` + strings.Repeat("h", 129) + `": "x"}`, problem: "want 1 to 128"},
		{in: `{"a": "1", "A": "2"}`, problem: "appears twice"},
		{in: many, problem: "more than 32 headers"},
		{in: `{"a": "1"} {}`, problem: "text after the object"},
		{in: `{"Status": "404"}`, problem: "reserved"},
		{in: `{"description": "x"}`, problem: "reserved"},
		{in: `{"big": "` + strings.Repeat("v", contract.MaxHeaderValue+1) + `"}`, problem: "over the 4096 allowed"},
		{in: `{"a": "` + strings.Repeat("v", 4000) + `", "b": "` + strings.Repeat("v", 4000) + `", "c": "` + strings.Repeat("v", 4000) + `", "d": "` + strings.Repeat("v", 1000) + `"}`, problem: "headers of over"},
		{in: `{"a": "1"`, problem: "not JSON"},
		{in: ``, problem: "not JSON"},
	}
	for _, c := range cases {
		got, err := ParseHeaders([]byte(c.in))
		switch {
		case c.problem == "" && err != nil:
			t.Errorf("ParseHeaders(%.60q): %v", c.in, err)
		case c.problem != "" && (err == nil || !strings.Contains(err.Error(), c.problem)):
			t.Errorf("ParseHeaders(%.60q) = %v, %v; want an error containing %q", c.in, got, err, c.problem)
		case c.problem == "" && !reflect.DeepEqual(got, c.want):
			t.Errorf("ParseHeaders(%.60q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestEventHeadersProblem: a row whose headers cannot be published is a
// dead letter with the reason, like a NULL column; its other fields stay.
func TestEventHeadersProblem(t *testing.T) {
	f := Fields{ID: []byte("id-1"), AggregateType: []byte("order"), AggregateID: []byte("1"), EventType: []byte("created"),
		Payload: []byte(`{}`), Headers: []byte(`{"Nats-Msg-Id": "other"}`)}
	ev := NewEvent(f, Position{})
	if !strings.HasPrefix(ev.Problem, "headers: ") || ev.Headers != nil || ev.ID != "id-1" {
		t.Errorf("event %+v", ev)
	}
	f.Headers = []byte(`{"traceparent": "t"}`)
	if ev := NewEvent(f, Position{}); ev.Problem != "" || len(ev.Headers) != 1 {
		t.Errorf("event %+v", ev)
	}
}

func FuzzParseHeaders(f *testing.F) {
	for _, s := range []string{`null`, `{}`, `{"traceparent": "x"}`, `{"a": 1}`, `[]`, `{"Nats-x": "y"}`, `{"a":"b","A":"c"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		hs, err := ParseHeaders(in)
		if err != nil {
			if hs != nil {
				t.Fatalf("headers %v with error %v", hs, err)
			}
			return
		}
		if len(hs) > contract.MaxHeaders {
			t.Fatalf("%d headers", len(hs))
		}
		for _, h := range hs {
			if err := contract.CheckHeaderName(h.Name); err != nil {
				t.Fatalf("accepted header name: %v", err)
			}
		}
	})
}

// TestDecodeHeadersColumn: a json or jsonb headers column is read; a column
// named headers of another type is someone else's and never read.
func TestDecodeHeadersColumn(t *testing.T) {
	for _, c := range []struct {
		typ  uint32
		want int
	}{{3802, 1}, {114, 1}, {25, 0}, {1009, 0}} {
		cols := append(append([]col{}, seedColumns...), col{"headers", c.typ})
		values := append(seedRow("id-1", "order", "1", "created", `{}`), str(`{"traceparent": "00-ab-01"}`))
		d := NewDecoder(outbox)
		msgs := decodeAll(t, d, msgBegin(0x20, 1), msgRelation(5, "public", "outbox_events", cols), msgInsert(5, values...), msgCommit(0x20, 0x40))
		ev := msgs[2].Event
		if len(ev.Headers) != c.want || ev.Problem != "" {
			t.Errorf("headers column of type %d: event %+v", c.typ, ev)
		}
	}
}
