// Package core is what the two relays, the WAL relay (package relay) and
// the polling relay (package poll), share: the dependencies they are
// given, their publishing settings, the Postgres pool and the stream they
// open, the callback that records dead letters, and the group that owns
// their background goroutines.
//
//	relay (WAL) ─┐
//	             ├─▶ core ─▶ sink/jetstream (the stream, its publisher and reader)
//	poll (table) ┘       └─▶ checkpoint (the relay's record, dead letters)
package core

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// Deps are what a relay is given rather than builds: a NATS connection
// (the caller owns it and closes it after Run), the registry its metrics
// go to, its logger, and the TracerProvider its events' spans come from
// (nil: not traced; the caller owns it and shuts it down after Run, so
// that the spans of the drain are flushed).
type Deps struct {
	NATS     *nats.Conn
	Registry prometheus.Registerer
	Log      zerolog.Logger
	Tracer   trace.TracerProvider
}

// Check fills in a missing registry and refuses missing dependencies;
// what names the relay ("relay", "poll") for the error.
func (d *Deps) Check(what string) error {
	if d.NATS == nil {
		return errors.New(what + ": no NATS connection")
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	return nil
}

// OpenStream provisions the stream p names, waiting while NATS or
// JetStream is unavailable (see jetstream.Open).
func OpenStream(ctx context.Context, d Deps, p Publishing) (*jetstream.Stream, error) {
	return jetstream.Open(ctx, d.NATS, p.StreamSpec(), d.Log)
}

// DeadLetterKey names a dead-lettered event in Postgres as `dlq retry`
// and a one-shot publish look it up: its id as the row holds it, also when
// a Nats-Msg-Id cannot carry it (whitespace), so that the dead-letter view
// and `dlq retry` find its row; qualified by its table (schema.table/id)
// when the relay reads several tables, whose ids may be equal; its
// position only when it has no id at all. The relay's records key it by
// sink.DeadLetterKey (see RecordDeadLetter), which is the same for every
// id a dead letter carries whole.
func DeadLetterKey(ev *decode.Event) string {
	if ev.ID == "" {
		return ev.Position.String()
	}
	return ev.MsgID()
}

// RecordDeadLetter returns the destination's callback that records a dead
// letter in Postgres (see jetstream.Config.RecordDeadLetter), keyed by
// sink.DeadLetterKey: its id as the row holds it, also when a Nats-Msg-Id
// cannot carry it (whitespace), so that the dead-letter view and `dlq
// retry` find its row, qualified by its table when the relay reads several
// (sink.RowKey); the id its dead letter is stored under when it has none.
func RecordDeadLetter(store *checkpoint.Store) func(context.Context, *decode.Event, string, string) error {
	return func(ctx context.Context, ev *decode.Event, stored, reason string) error {
		return store.RecordDeadLetter(ctx, sink.DeadLetterKey(sink.RowKey(ev.Table, ev.ID, ev.QualifyID), stored), reason, ev.Position.CommitLSN)
	}
}
