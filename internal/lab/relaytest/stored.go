package relaytest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
)

// StreamInOrder reads every message of the stream in stream order; deleted
// ones are gone.
func StreamInOrder(t testing.TB, env *Env) []*jetstream.RawStreamMsg {
	t.Helper()
	stream := env.StreamHandle(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted
		}
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// StoredByID reads every message of the stream, keyed by event id (a dead
// letter's too); a later message of the same event wins.
func StoredByID(t testing.TB, env *Env) map[string]*jetstream.RawStreamMsg {
	t.Helper()
	out := map[string]*jetstream.RawStreamMsg{}
	for _, m := range StreamInOrder(t, env) {
		out[strings.TrimPrefix(m.Header.Get(contract.HeaderMsgID), contract.DeadLetterMsgIDPrefix)] = m
	}
	return out
}

// LastOnSubjects returns the stream's last message on subject (a filter:
// wildcards allowed).
func LastOnSubjects(t testing.TB, env *Env, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := env.StreamHandle(time.Second).GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// RequireSameSource fails the test unless got (published by a tool) names
// the same source as want (published by the relay): the Postgres system,
// timeline, slot and slot creation point.
func RequireSameSource(t testing.TB, want, got *jetstream.RawStreamMsg) {
	t.Helper()
	if want == nil || got == nil {
		t.Fatalf("messages to compare: %v, %v", want, got)
	}
	if want.Header.Get(contract.HeaderSourceSystem) == "" {
		t.Fatalf("the relay's message has no source: %v", want.Header)
	}
	for _, h := range []string{contract.HeaderSourceSystem, contract.HeaderSourceTimeline, contract.HeaderSourceSlot, contract.HeaderSourceOrigin} {
		if got.Header.Get(h) != want.Header.Get(h) {
			t.Errorf("%s: %q, the relay's messages have %q", h, got.Header.Get(h), want.Header.Get(h))
		}
	}
}
