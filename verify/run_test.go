package verify

import (
	"context"
	"slices"
	"testing"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// fakeRows is a Querier whose every query returns the same ids.
type fakeRows []string

func (f fakeRows) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return &rowsOf{ids: f, i: -1}, nil
}

// rowsOf implements what pgx.ForEachRow calls; the embedded interface
// (nil) stands for the rest.
type rowsOf struct {
	pgx.Rows
	ids []string
	i   int
}

func (r *rowsOf) Close()                        {}
func (r *rowsOf) Err() error                    { return nil }
func (r *rowsOf) CommandTag() pgconn.CommandTag { return pgconn.NewCommandTag("SELECT") }
func (r *rowsOf) Next() bool                    { r.i++; return r.i < len(r.ids) }
func (r *rowsOf) Scan(dest ...any) error        { *dest[0].(*string) = r.ids[r.i]; return nil }

// TestRun reads a real stream: the report sees what the relay's headers
// say, also when only headers are fetched, and the messages it cannot read.
func TestRun(t *testing.T) {
	srv, err := devenv.StartNATS(devenv.NATSOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>", "outbox-dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(m *nats.Msg) {
		t.Helper()
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(id string, lsn uint64) *nats.Msg {
		e := decode.Event{ID: id, AggregateType: "order", AggregateID: "7", EventType: "created", Payload: []byte(`{}`),
			CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), Position: decode.Position{CommitLSN: pglogrepl.LSN(0x100 + 0x10*lsn)}}
		return jssink.EventMsg(&e, "outbox.order.created")
	}
	publish(ev("a", 1))
	publish(ev("c", 3))
	publish(ev("b", 2)) // stored after c: out of order
	publish(&nats.Msg{Subject: "outbox.order.created", Data: []byte("not the relay's")})
	publish(ev("zombie", 4))

	rep, err := Run(ctx, fakeRows{"a", "b", "c", "d"}, jssink.NewReader(js, stream, "outbox.>", "outbox-dlq", nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	if rep.OK() {
		t.Fatal("report OK, want problems")
	}
	if rep.Rows != 4 || rep.Messages != 5 {
		t.Errorf("rows %d messages %d, want 4 5", rep.Rows, rep.Messages)
	}
	if !slices.Equal(rep.Missing, []string{"d"}) || !slices.Equal(rep.Extra, []string{"zombie"}) {
		t.Errorf("missing %v extra %v, want [d] [zombie]", rep.Missing, rep.Extra)
	}
	if len(rep.OrderViolations) != 1 || rep.OrderViolations[0].EventID != "b" {
		t.Errorf("order violations %v, want b after c", rep.OrderViolations)
	}
	if len(rep.Unparsed) != 1 || rep.Unparsed[0].Seq != 4 {
		t.Errorf("unparsed %v, want message 4", rep.Unparsed)
	}
}
