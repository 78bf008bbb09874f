package decode

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseHeaders(t *testing.T) {
	many := "{"
	for i := 0; i <= MaxHeaders; i++ {
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
		if len(hs) > MaxHeaders {
			t.Fatalf("%d headers", len(hs))
		}
		for _, h := range hs {
			if err := CheckHeaderName(h.Name); err != nil {
				t.Fatalf("accepted header name: %v", err)
			}
		}
	})
}
