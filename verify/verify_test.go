package verify

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// stored builds the message the relay publishes for an event, as the
// stream holds it.
func stored(id, agg string, lsn pglogrepl.LSN, idx uint32) *jetstream.RawStreamMsg {
	ev := decode.Event{ID: id, AggregateType: "order", AggregateID: agg, EventType: "created",
		CreatedAt: "2024-05-01T10:00:00Z", Position: decode.Position{CommitLSN: lsn, Index: idx}}
	m := jssink.EventMsg(&ev, "outbox.order.created")
	return &jetstream.RawStreamMsg{Subject: m.Subject, Header: m.Header}
}

// deadLetter is the dead-letter message of an event.
func deadLetter(id, agg string, lsn pglogrepl.LSN) *jetstream.RawStreamMsg {
	m := stored(contract.DeadLetterMsgIDPrefix+id, agg, lsn, 0)
	m.Subject = "outbox-dlq"
	return m
}

// with returns m with header key set to v ("" deletes it).
func with(m *jetstream.RawStreamMsg, key, v string) *jetstream.RawStreamMsg {
	h := nats.Header{}
	for k, vs := range m.Header {
		h[k] = slices.Clone(vs)
	}
	if v == "" {
		h.Del(key)
	} else {
		h.Set(key, v)
	}
	c := *m
	c.Header = h
	return &c
}

func foreign() *jetstream.RawStreamMsg {
	return &jetstream.RawStreamMsg{Subject: "outbox.order.created", Header: nats.Header{"Nats-Msg-Id": {"x"}}}
}

func TestComparison(t *testing.T) {
	may1 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		rows     []string
		msgs     []*jetstream.RawStreamMsg
		opts     Options
		messages int // stream messages compared
		dead     int
		missing  []string
		extra    []string
		dups     map[string]int
		order    []Violation
		unparsed []uint64 // stream sequences
	}{
		{
			name:     "all there in order",
			rows:     []string{"a", "b", "c"},
			msgs:     []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), stored("b", "1", 0x10, 1), stored("c", "2", 0x20, 0)},
			messages: 3,
		},
		{
			name:     "duplicate",
			rows:     []string{"a", "b"},
			msgs:     []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), stored("b", "1", 0x20, 0), stored("b", "1", 0x20, 0)},
			messages: 3,
			dups:     map[string]int{"b": 2},
		},
		{
			name:     "unknown id",
			rows:     []string{"a"},
			msgs:     []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), stored("rolled-back", "1", 0x20, 0)},
			messages: 2,
			extra:    []string{"rolled-back"},
		},
		{
			name:     "missing row",
			rows:     []string{"a", "b", "c"},
			msgs:     []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), stored("c", "1", 0x30, 0)},
			messages: 2,
			missing:  []string{"b"},
		},
		{
			name:     "reordered pair within an aggregate",
			rows:     []string{"a", "b"},
			msgs:     []*jetstream.RawStreamMsg{stored("b", "1", 0x20, 0), stored("a", "1", 0x10, 0)},
			messages: 2,
			order:    []Violation{{Aggregate: "order/1", EventID: "a", After: "b"}},
		},
		{
			name:     "reordered within a transaction",
			rows:     []string{"a", "b"},
			msgs:     []*jetstream.RawStreamMsg{stored("b", "1", 0x10, 1), stored("a", "1", 0x10, 0)},
			messages: 2,
			order:    []Violation{{Aggregate: "order/1", EventID: "a", After: "b"}},
		},
		{
			name:     "other aggregates may interleave",
			rows:     []string{"a", "b"},
			msgs:     []*jetstream.RawStreamMsg{stored("b", "2", 0x20, 0), stored("a", "1", 0x10, 0)},
			messages: 2,
		},
		{
			name:     "rows published from the table have no WAL order",
			rows:     []string{"a", "b", "c"},
			msgs:     []*jetstream.RawStreamMsg{stored("c", "1", 0x30, 0), stored("a", "1", 0, 0), stored("b", "1", 0, 1)},
			messages: 3,
		},
		{
			name: "replay's copies are no delivery, and no duplicate",
			rows: []string{"a", "b"},
			msgs: []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), stored("b", "1", 0x20, 0),
				with(stored(contract.ReplayMsgID("r1", "a"), "1", 0, 0), contract.HeaderReplay, contract.ReplayCopy),
				with(stored("b", "1", 0, 1), contract.HeaderReplay, contract.ReplayCopy)},
			messages: 2,
		},
		{
			name:     "a dead letter delivers its event, outside the order",
			rows:     []string{"a", "b"},
			msgs:     []*jetstream.RawStreamMsg{stored("b", "1", 0x20, 0), deadLetter("a", "1", 0x10)},
			messages: 2,
			dead:     1,
		},
		{
			name:     "message without the relay's headers",
			rows:     []string{"a"},
			msgs:     []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), foreign()},
			messages: 2,
			unparsed: []uint64{2},
		},
		{
			name:     "message with no headers at all",
			rows:     []string{"a"},
			msgs:     []*jetstream.RawStreamMsg{{Subject: "outbox.order.created"}, stored("a", "1", 0x10, 0)},
			messages: 2,
			unparsed: []uint64{1},
		},
		{
			name:     "commit LSN that does not parse",
			rows:     []string{"a"},
			msgs:     []*jetstream.RawStreamMsg{with(stored("a", "1", 0x10, 0), contract.HeaderCommitLSN, "not-an-lsn")},
			messages: 1,
			missing:  []string{"a"},
			unparsed: []uint64{1},
		},
		{
			name:     "transaction index that does not parse",
			rows:     []string{"a"},
			msgs:     []*jetstream.RawStreamMsg{with(stored("a", "1", 0x10, 0), contract.HeaderTxnIndex, "-1")},
			messages: 1,
			missing:  []string{"a"},
			unparsed: []uint64{1},
		},
		{
			name:     "no message id",
			rows:     []string{"a"},
			msgs:     []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), with(stored("b", "1", 0x20, 0), contract.HeaderMsgID, "")},
			messages: 2,
			unparsed: []uint64{2},
		},
		{
			name:     "outside the range: not compared",
			rows:     []string{"a"},
			opts:     Options{Since: may1, Until: may1.Add(24 * time.Hour)},
			msgs:     []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), with(stored("old", "1", 0x08, 0), contract.HeaderCreatedAt, "2024-04-30T23:59:59Z")},
			messages: 1,
		},
		{
			name:     "created at that does not parse, with a range",
			rows:     []string{"a"},
			opts:     Options{Since: may1},
			msgs:     []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), with(stored("b", "1", 0x20, 0), contract.HeaderCreatedAt, "yesterday")},
			messages: 2,
			unparsed: []uint64{2},
		},
		{
			name:     "foreign message stored within the range",
			rows:     []string{"a"},
			opts:     Options{Since: may1},
			msgs:     []*jetstream.RawStreamMsg{stored("a", "1", 0x10, 0), foreign()},
			messages: 2,
			unparsed: []uint64{2},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows := map[string]struct{}{}
			for _, id := range c.rows {
				rows[id] = struct{}{}
			}
			cmp := newComparison(rows, c.opts)
			for i, m := range c.msgs {
				m.Sequence = uint64(i + 1)
				if m.Time.IsZero() {
					m.Time = may1.Add(time.Hour)
				}
				cmp.add(jssink.ParseStored(m))
			}
			r := cmp.report()
			var unparsed []uint64
			for _, u := range r.Unparsed {
				unparsed = append(unparsed, u.Seq)
				if u.Reason == "" || !strings.Contains(u.String(), fmt.Sprint(u.Seq)) {
					t.Errorf("unparsed message without a reason: %+v", u)
				}
			}
			switch {
			case r.Rows != len(c.rows) || r.Messages != c.messages || r.DeadLetters != c.dead:
				t.Errorf("rows %d messages %d dead letters %d, want %d %d %d", r.Rows, r.Messages, r.DeadLetters, len(c.rows), c.messages, c.dead)
			case !slices.Equal(r.Missing, c.missing):
				t.Errorf("missing %v, want %v", r.Missing, c.missing)
			case !slices.Equal(r.Extra, c.extra):
				t.Errorf("extra %v, want %v", r.Extra, c.extra)
			case !maps.Equal(r.Duplicates, c.dups) && len(r.Duplicates)+len(c.dups) > 0:
				t.Errorf("duplicates %v, want %v", r.Duplicates, c.dups)
			case !slices.Equal(r.OrderViolations, c.order):
				t.Errorf("order violations %v, want %v", r.OrderViolations, c.order)
			case !slices.Equal(unparsed, c.unparsed):
				t.Errorf("unparsed %v, want %v", r.Unparsed, c.unparsed)
			}
			problems := len(c.missing) + len(c.extra) + len(c.dups) + len(c.order) + len(c.unparsed)
			if r.OK() != (problems == 0) {
				t.Errorf("OK() = %v with %d problems: %+v", r.OK(), problems, r)
			}
		})
	}
}
