package relaytest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
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

// FirstStoredSince returns, of the events whose first copy the stream
// stored at or after since (by the server's timestamps), the first in
// commit order, and whether there is one. Events published from the table
// at the slot's creation (commit LSN 0/0) have no place in that order and
// are left out. After an outage that began before since, it is an event
// that was not stored, so not acknowledged, when the outage began: the
// slot must never have been confirmed past its commit.
func FirstStoredSince(t testing.TB, env *Env, since time.Time) (sink.StoredEvent, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), env.checkBudget())
	defer cancel()
	seen := map[string]bool{}
	var first sink.StoredEvent
	found := false
	err := jssink.Messages(ctx, env.StreamHandle(10*time.Second), []string{env.subjectFilter()}, func(m *jetstream.RawStreamMsg) {
		ev, ok := jssink.ParseStored(m)
		if !ok || seen[ev.ID] {
			return
		}
		seen[ev.ID] = true
		if ev.Position.CommitLSN == 0 || m.Time.Before(since) {
			return
		}
		if !found || ev.Position.Less(first.Position) {
			first, found = ev, true
		}
	})
	if err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	return first, found
}
