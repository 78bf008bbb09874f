package verify

import (
	"maps"
	"slices"
	"testing"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

var (
	tableA = contract.Table{Schema: "public", Name: "a_events"}
	tableB = contract.Table{Schema: "shop", Name: "b_events"}
)

// storedIn is the message a relay publishes for the event of table with
// id: qualified says the relay read several tables.
func storedIn(table contract.Table, id string, qualified bool, lsn pglogrepl.LSN) *jetstream.RawStreamMsg {
	ev := decode.Event{ID: id, Table: table.String(), QualifyID: qualified, AggregateType: "order", AggregateID: id, EventType: "created",
		CreatedAt: "2024-05-01T10:00:00Z", Position: decode.Position{CommitLSN: lsn}}
	m := jssink.EventMsg(&ev, "outbox.order.created")
	return &jetstream.RawStreamMsg{Subject: m.Subject, Header: m.Header}
}

// TestComparisonTables: with several tables, rows and messages are
// compared by table and id, so equal ids of two tables are two events;
// a message counts whether its id is qualified or plain (stored before
// the relay read several tables), for the first table when it names
// none, and not at all when it names a table not compared.
func TestComparisonTables(t *testing.T) {
	two := Options{Table: tableA, MoreTables: []contract.Table{tableB}}
	cases := []struct {
		name    string
		opts    Options
		rows    []string
		msgs    []*jetstream.RawStreamMsg
		counted int
		missing []string
		extra   []string
		dups    map[string]int
	}{
		{
			name:    "equal ids of two tables are two events",
			opts:    two,
			rows:    []string{"public.a_events/1", "shop.b_events/1"},
			msgs:    []*jetstream.RawStreamMsg{storedIn(tableA, "1", true, 0x10), storedIn(tableB, "1", true, 0x20)},
			counted: 2,
		},
		{
			name:    "one table's event stored, the other's missing",
			opts:    two,
			rows:    []string{"public.a_events/1", "shop.b_events/1"},
			msgs:    []*jetstream.RawStreamMsg{storedIn(tableA, "1", true, 0x10)},
			counted: 1,
			missing: []string{"shop.b_events/1"},
		},
		{
			name: "stored plain before the table was added, then qualified: one event twice",
			opts: two,
			rows: []string{"public.a_events/1"},
			msgs: []*jetstream.RawStreamMsg{storedIn(tableA, "1", false, 0x10), storedIn(tableA, "1", true, 0x10),
				with(storedIn(tableA, "1", false, 0x10), contract.HeaderTable, "")},
			counted: 3,
			dups:    map[string]int{"public.a_events/1": 3},
		},
		{
			name:    "another table's message is not compared",
			opts:    Options{Table: tableA},
			rows:    []string{"1"},
			msgs:    []*jetstream.RawStreamMsg{storedIn(tableA, "1", true, 0x10), storedIn(tableB, "1", true, 0x20), storedIn(tableB, "2", false, 0x30)},
			counted: 1,
		},
		{
			name:    "a row whose own id looks qualified",
			opts:    Options{Table: tableA},
			rows:    []string{"public.a_events/x"},
			msgs:    []*jetstream.RawStreamMsg{storedIn(tableA, "public.a_events/x", false, 0x10)},
			counted: 1,
		},
		{
			name:    "a message of no table counts for the first",
			opts:    two,
			rows:    []string{"public.a_events/1"},
			msgs:    []*jetstream.RawStreamMsg{with(storedIn(tableB, "9", false, 0x10), contract.HeaderTable, "")},
			counted: 1,
			missing: []string{"public.a_events/1"},
			extra:   []string{"public.a_events/9"},
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
				m.Sequence, m.Time = uint64(i+1), time.Now()
				cmp.add(jssink.ParseStored(m))
			}
			r := cmp.report()
			switch {
			case r.Messages != c.counted:
				t.Errorf("%d messages compared, want %d", r.Messages, c.counted)
			case !slices.Equal(r.Missing, c.missing):
				t.Errorf("missing %v, want %v", r.Missing, c.missing)
			case !slices.Equal(r.Extra, c.extra):
				t.Errorf("extra %v, want %v", r.Extra, c.extra)
			case !maps.Equal(r.Duplicates, c.dups) && len(r.Duplicates)+len(c.dups) > 0:
				t.Errorf("duplicates %v, want %v", r.Duplicates, c.dups)
			}
		})
	}
}
