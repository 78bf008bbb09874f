package core

import (
	"errors"
	"time"

	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// Publishing is how a relay publishes, whichever source its events come
// from: the stream and its subjects, and the publisher's limits. Zero
// durations and sizes take the defaults of package jetstream.
type Publishing struct {
	Stream            string
	Subject           sink.Template
	DeadLetterSubject string
	// DuplicateWindow is the dedup window of a stream the relay creates.
	DuplicateWindow time.Duration
	// StreamSettings are the replicas, storage and limits of a stream the
	// relay creates.
	StreamSettings jetstream.StreamSettings
	// Format is the form of event messages: the relay's own, or
	// CloudEvents (binary content mode).
	Format jetstream.Format

	// AtomicTransactions publishes each transaction of the WAL as one
	// atomic batch (jetstream.Config.Atomic); the stream must allow it.
	AtomicTransactions bool

	Window       int           // most events awaiting a PubAck
	WindowBytes  int           // most payload bytes awaiting PubAcks
	AckTimeout   time.Duration // before an event is republished
	DrainTimeout time.Duration // how long shutdown waits for PubAcks
	// FastIngest, when auto, publishes in fast-ingest batches where the
	// server and the stream allow it.
	FastIngest jetstream.FastIngest
	FastLinger time.Duration // how long a batch stays open with nothing to send
}

// Validate names the first field that cannot work.
func (p Publishing) Validate() error {
	switch {
	case p.Stream == "":
		return errors.New("no stream")
	case p.Subject.String() == "":
		return errors.New("no subject template")
	case p.DeadLetterSubject == "":
		return errors.New("no dead-letter subject")
	}
	if err := p.FastIngest.Validate(); err != nil {
		return err
	}
	return p.Format.Validate()
}

// StreamSpec is the stream the relay creates, or checks when it exists.
func (p Publishing) StreamSpec() jetstream.StreamSpec {
	return jetstream.StreamSpec{
		Name:              p.Stream,
		Template:          p.Subject,
		DeadLetterSubject: p.DeadLetterSubject,
		DuplicateWindow:   p.DuplicateWindow,
		StreamSettings:    p.StreamSettings,
		Atomic:            p.AtomicTransactions,
	}
}

// PublisherConfig is the publisher's configuration, before what the relay
// adds of its own (its source, its dead-letter records).
func (p Publishing) PublisherConfig() jetstream.Config {
	return jetstream.Config{
		Subject:           p.Subject,
		DeadLetterSubject: p.DeadLetterSubject,
		Window:            p.Window,
		WindowBytes:       p.WindowBytes,
		AckTimeout:        p.AckTimeout,
		Format:            p.Format,
		FastIngest:        p.FastIngest,
		FastLinger:        p.FastLinger,
	}
}
