package relay

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
	"github.com/outbox-relay/outbox-relay/sink/memory"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/verify"
)

// Two relays share one stream and subject template, and their commit
// positions overlap (relay A streams from another cluster). Relay B
// stored the first event of a transaction and died before the second was
// stored; A's message sits at the second one's position. B's next event
// was stored, before a point-in-time recovery, at the same position with
// another id. When B's slot replays, B must skip exactly its own stored
// event and publish the other two. Before the fix it skipped all three:
// the skip set trusted any message's position.
func TestTwoRelaysShareAStream(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	cfg := testConfig(t, env)
	mustTakeUp(t, env, cfg, checkpoint.Bootstrap)
	first := env.Tx(relaytest.NewRow("order", "1", "created", `{"n":1}`), relaytest.NewRow("order", "1", "paid", `{"n":2}`))
	second := env.Tx(relaytest.NewRow("order", "2", "created", `{"n":3}`))
	commits := commitLSNs(t, env)
	if len(commits) != 2 {
		t.Fatalf("the slot will replay %d transactions, want 2", len(commits))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := relaySource(ctx, t, env)
	a := sink.Source{System: "1", Timeline: 1, Slot: env.Slot, Origin: b.Origin}
	earlierTimeline := b
	earlierTimeline.Timeline++
	stream := env.StreamHandle(10 * time.Second)
	for _, m := range []struct {
		id, eventType string
		at            decode.Position
		src           sink.Source
	}{
		{first[0], "created", decode.Position{CommitLSN: commits[0], Index: 0}, b},
		{"relay-a-event", "paid", decode.Position{CommitLSN: commits[0], Index: 1}, a},
		{"lost-timeline-event", "created", decode.Position{CommitLSN: commits[1], Index: 0}, earlierTimeline},
	} {
		ev := orderEvent(m.id, m.eventType, m.at)
		msg := jssink.EventMsg(ev, cfg.Subject.Render(ev))
		jssink.SetSourceHeaders(msg.Header, m.src)
		if _, err := env.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	// Not synchronisation: past the stream's duplicate window, only the
	// relay can keep its stored event from being stored twice.
	time.Sleep(cfg.DuplicateWindow + 200*time.Millisecond)

	runUntilCaughtUp(t, env, cfg)
	counts := map[string]int{}
	err := jssink.Messages(ctx, stream, nil, func(m *jetstream.RawStreamMsg) { counts[m.Header.Get(contract.HeaderMsgID)]++ })
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first[0], first[1], second[0], "relay-a-event", "lost-timeline-event"} {
		if counts[id] != 1 {
			t.Errorf("event %s stored %d times, want once (stream: %v)", id, counts[id], counts)
		}
	}
	// verify, given the relay's source, leaves relay A's message out.
	rep, err := verify.Run(ctx, env.Pool, jssink.NewReader(env.JS, stream, cfg.Subject.Filter(), cfg.DeadLetterSubject, nil), verify.Options{Table: cfg.Table, Source: b})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Missing) != 0 || !slices.Equal(rep.Extra, []string{"lost-timeline-event"}) {
		t.Errorf("verify with the relay's source: missing %v, extra %v; want none missing, the lost timeline's event extra", rep.Missing, rep.Extra)
	}
}

// A replayed event whose position the stream holds with another id is
// not skipped.
func TestSkipNeedsTheStoredID(t *testing.T) {
	src := sink.Source{System: "7301234567890123456", Timeline: 1, Slot: "outbox_relay", Origin: 0x100}
	dest := memory.New(1, sink.NewStamp(src))
	at := decode.Position{CommitLSN: 0x16B3748, Index: 1}
	dest.Put(sink.StoredEvent{ID: "stored-id", Position: at, Source: src})
	noID := decode.Position{CommitLSN: 0x16B3748, Index: 2}
	dest.Put(sink.StoredEvent{ID: noID.String(), Position: noID, Source: src, DeadLetter: true}) // a dead letter without an id: its Nats-Msg-Id names the position
	held, err := checkpoint.ReadHoldings(context.Background(), dest, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeline{tracker: checkpoint.NewTracker(0), held: held, skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "skipped"})}
	for _, c := range []struct {
		ev   decode.Event
		skip bool
	}{
		{decode.Event{ID: "stored-id", Position: at}, true},
		{decode.Event{ID: "another-id", Position: at}, false},
		{decode.Event{ID: "stored-id", Position: decode.Position{CommitLSN: 0x16B3748, Index: 0}}, false},
		{decode.Event{ID: "", Problem: "id is NULL", Position: noID}, true},
	} {
		if got := p.skip(&c.ev); got != c.skip {
			t.Errorf("event %q at %s: skipped %v, want %v", c.ev.ID, c.ev.Position, got, c.skip)
		}
	}
}

// relaySource is the source the relay under test stamps its messages
// with: the server's identity, its slot and the slot's first position.
func relaySource(ctx context.Context, t *testing.T, env *relaytest.Env) sink.Source {
	t.Helper()
	_, repl, err := replication.ParseConnString(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identifySystem(ctx, repl)
	if err != nil {
		t.Fatal(err)
	}
	return sink.Source{System: id.SystemID, Timeline: uint32(id.Timeline), Slot: env.Slot, Origin: loadRecord(t, env).CreatedLSN}
}

// orderEvent is an event of order 1 with an empty payload, at a position.
func orderEvent(id, eventType string, at decode.Position) *decode.Event {
	return &decode.Event{ID: id, AggregateType: "order", AggregateID: "1", EventType: eventType,
		CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), Payload: []byte(`{}`), Position: at}
}

// commitLSNs returns the commit LSNs of the transactions with outbox
// inserts the slot will replay, in order.
func commitLSNs(t *testing.T, env *relaytest.Env) []pglogrepl.LSN {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2)`, env.Slot, env.Pub)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []pglogrepl.LSN
	var begin pglogrepl.LSN
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			t.Fatal(err)
		}
		msg, err := pglogrepl.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pglogrepl.BeginMessage:
			begin = m.FinalLSN
		case *pglogrepl.InsertMessage:
			if len(out) == 0 || out[len(out)-1] != begin {
				out = append(out, begin)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// runUntilCaughtUp runs the relay until its slot has confirmed everything
// written so far, then stops it.
func runUntilCaughtUp(t *testing.T, env *relaytest.Env, cfg Config) {
	t.Helper()
	nc, err := nats.Connect(env.NATSURL, nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r, err := New(cfg, core.Deps{NATS: nc, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	target := env.WALPosition()
	waitFor(t, time.Minute, "the slot to confirm the replayed transactions", func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
		}
		return env.SlotInfo().ConfirmedFlush >= target
	})
}

// A dead letter whose PubAck arrived just before the relay died, before
// its record was written to Postgres: on replay the event is skipped (the
// stream holds it), and the record is written from what the stream holds,
// so `dlq list` and the dead-letter view still show it.
func TestDeadLetterStoredButNotRecorded(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	cfg := testConfig(t, env)
	mustTakeUp(t, env, cfg, checkpoint.Bootstrap)
	ids := env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
	commits := commitLSNs(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := relaySource(ctx, t, env)
	ev := orderEvent(ids[0], "created", decode.Position{CommitLSN: commits[0]})
	msg := jssink.EventMsg(ev, cfg.DeadLetterSubject)
	msg.Header.Set(contract.HeaderMsgID, contract.DeadLetterMsgIDPrefix+ids[0])
	msg.Header.Set(contract.HeaderDeadLetterReason, "refused by the stream")
	jssink.SetSourceHeaders(msg.Header, src)
	if _, err := env.JS.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}

	runUntilCaughtUp(t, env, cfg)
	var reason string
	if err := env.Pool.QueryRow(ctx, `SELECT reason FROM `+checkpoint.DeadLettersTable+` WHERE event_id = $1`, ids[0]).Scan(&reason); err != nil {
		t.Fatalf("the dead letter the stream holds was not recorded: %v", err)
	}
	if reason != "refused by the stream" {
		t.Errorf("recorded reason %q", reason)
	}
	if n := env.CountStored(); n != 1 {
		t.Errorf("stream holds %d messages, want the dead letter only", n)
	}
}

// A system without an identifier would stamp a zero Source, which
// sink.SameRelay takes for every relay's messages: refused.
func TestSourceNeedsASystemIdentifier(t *testing.T) {
	_, err := newSourceFrom(pglogrepl.IdentifySystemResult{Timeline: 1}, nil, "outbox_relay", zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "no system identifier") {
		t.Fatalf("newSourceFrom without a system identifier = %v; want it refused", err)
	}
}
