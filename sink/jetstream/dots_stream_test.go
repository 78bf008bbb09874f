package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// TestDottedSubjectsOnJetStream: with DotsTokens the relay's stream is
// created covering prefix.>, and a consumer filtering outbox.order.> (or
// the exact outbox.order.order.created) receives an order.created event;
// a hostile value stays under the prefix.
func TestDottedSubjectsOnJetStream(t *testing.T) {
	js, nc := startJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tpl, err := sink.ParseTemplate(contract.DefaultSubject, sink.WithDots(sink.DotsTokens))
	if err != nil {
		t.Fatal(err)
	}
	spec := StreamSpec{Name: "DOTS", Template: tpl, DeadLetterSubject: contract.DefaultDeadLetterSubject}
	cfg, err := EnsureStream(ctx, js, spec, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Subjects[0] != "outbox.*.>" {
		t.Fatalf("stream created with subjects %v, want outbox.*.> first", cfg.Subjects)
	}
	stream, err := js.Stream(ctx, "DOTS")
	if err != nil {
		t.Fatal(err)
	}
	wide, err := stream.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "orders", FilterSubject: "outbox.order.>"})
	if err != nil {
		t.Fatal(err)
	}
	exact, err := stream.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "created", FilterSubject: "outbox.order.order.created"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPublisher(nc, Config{Subject: tpl, DeadLetterSubject: contract.DefaultDeadLetterSubject, Stream: stream}, zerolog.Nop(), NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	run(t, p)
	created := event(1, nil)
	created.EventType = "order.created"
	hostile := event(2, nil)
	hostile.AggregateType, hostile.EventType = "*", "..>.a b"
	for _, ev := range []*decode.Event{created, hostile} {
		if _, err := p.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, p, 10*time.Second)

	for name, c := range map[string]natsjs.Consumer{"outbox.order.>": wide, "outbox.order.order.created": exact} {
		batch, err := c.Fetch(2, natsjs.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got []natsjs.Msg
		for m := range batch.Messages() {
			got = append(got, m)
		}
		if len(got) != 1 || got[0].Subject() != "outbox.order.order.created" || got[0].Headers().Get(contract.HeaderMsgID) != created.ID ||
			got[0].Headers().Get(contract.HeaderEventType) != "order.created" {
			t.Errorf("consumer filtering %s got %d messages, want the order.created event once", name, len(got))
		}
	}
	msgs := readAll(t, stream)
	if len(msgs) != 2 || msgs[1].subject != "outbox.%2A.%2E%2E%3E%2Ea%20b" {
		t.Errorf("stream holds %v", msgs)
	}
}

// TestDottedSubjectsAdoptStream: an existing stream is adopted only when
// its subjects cover what the template renders: outbox.*.* made for
// escaped subjects is refused once values may span tokens, outbox.> is not.
func TestDottedSubjectsAdoptStream(t *testing.T) {
	js, _ := startJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A stream that stays: deleting an account's last stream removes its
	// directory in the background, and the next creation can fail with
	// "error creating store for stream" (see TestCreatedStreamSettings).
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}}); err != nil {
		t.Fatal(err)
	}
	escape, _ := sink.ParseTemplate(contract.DefaultSubject)
	tokens, _ := sink.ParseTemplate(contract.DefaultSubject, sink.WithDots(sink.DotsTokens))
	for _, c := range []struct {
		subjects []string
		tpl      sink.Template
		ok       bool
	}{
		{[]string{"outbox.*.*", contract.DefaultDeadLetterSubject}, escape, true},
		{[]string{"outbox.*.*", contract.DefaultDeadLetterSubject}, tokens, false},
		{[]string{"outbox.>", contract.DefaultDeadLetterSubject}, tokens, true},
		{[]string{"outbox.*.>", contract.DefaultDeadLetterSubject}, tokens, true},
		{[]string{"outbox.*.*.>", contract.DefaultDeadLetterSubject}, tokens, false},
	} {
		if err := js.DeleteStream(ctx, "ADOPT"); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
			t.Fatal(err)
		}
		if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "ADOPT", Subjects: c.subjects, Storage: natsjs.FileStorage}); err != nil {
			t.Fatal(err)
		}
		spec := StreamSpec{Name: "ADOPT", Template: c.tpl, DeadLetterSubject: contract.DefaultDeadLetterSubject}
		_, err := EnsureStream(ctx, js, spec, zerolog.Nop())
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrStreamConfig) {
			t.Errorf("stream %v, dots %s: EnsureStream = %v", c.subjects, c.tpl.Dots(), err)
		}
	}
}

func startJetStream(t *testing.T) (natsjs.JetStream, *nats.Conn) {
	t.Helper()
	srv, err := devenv.StartNATS(devenv.NATSOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	nc, js := connectJS(t, srv.URL())
	return js, nc
}

func readAll(t *testing.T, stream natsjs.Stream) []storedMsg {
	t.Helper()
	return (&testEnv{stream: stream}).contents(t)
}
