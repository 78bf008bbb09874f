package relay

import (
	"errors"
	"fmt"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Config is everything the relay needs to know. Zero durations and sizes
// take the defaults of the package that owns them (sink, replication).
type Config struct {
	// PGURL is an ordinary Postgres connection string; the replication
	// connection is derived from it.
	PGURL string
	// PrimaryURL, when set, names the primary where the relay keeps its
	// record (take-up record and lock, confirm limit, dead letters) while
	// PGURL names a hot standby (Postgres 16+) it streams from: the slot,
	// its snapshot and the slot's monitoring are there. See standby.go.
	PrimaryURL string

	Slot              string
	Publication       string
	Table             contract.Table
	Stream            string
	Subject           sink.Template
	DeadLetterSubject string
	// DuplicateWindow is the dedup window of a stream the relay creates.
	DuplicateWindow time.Duration
	// MessagePrefix, when set, relays table-less events too: transactional
	// logical messages with this prefix (Postgres 14+; see decode).
	MessagePrefix string

	Window         int           // most events awaiting a PubAck
	WindowBytes    int           // most payload bytes awaiting PubAcks
	AckTimeout     time.Duration // before an event is republished
	StatusInterval time.Duration // longest time between status updates
	DrainTimeout   time.Duration // how long shutdown waits for PubAcks

	// Repair drops the slot, creates a new one and publishes from its
	// snapshot every committed row the stream lacks, then streams: the way
	// back after a gap. RepairSince, when set, limits the comparison to
	// rows created at or after it.
	Repair      bool
	RepairSince time.Time

	// Failover makes the relay's slot a failover slot (Postgres 17+), which
	// physical standbys syncing slots keep a copy of: see failover.go.
	Failover bool
}

// Validate names the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.PGURL == "":
		return errors.New("relay: no Postgres connection string")
	case c.Table.Name == "":
		return errors.New("relay: no outbox table")
	case c.Stream == "":
		return errors.New("relay: no stream")
	case c.Subject.String() == "":
		return errors.New("relay: no subject template")
	case c.DeadLetterSubject == "":
		return errors.New("relay: no dead-letter subject")
	case c.PrimaryURL != "" && c.Failover:
		return errors.New("relay: --failover with --primary-url: a slot on a standby cannot be a failover slot; drop one of them")
	}
	if err := replication.CheckName("slot", c.Slot); err != nil {
		return fmt.Errorf("relay: slot: %w", err)
	}
	if err := replication.CheckName("publication", c.Publication); err != nil {
		return fmt.Errorf("relay: publication: %w", err)
	}
	return nil
}

func (c Config) streamSpec() jssink.StreamSpec {
	return jssink.StreamSpec{
		Name:              c.Stream,
		Template:          c.Subject,
		DeadLetterSubject: c.DeadLetterSubject,
		DuplicateWindow:   c.DuplicateWindow,
	}
}

// sinkConfig is the publisher's configuration for stream.
func (c Config) sinkConfig(stream jetstream.Stream, store *checkpoint.Store, source *sink.Stamp, trace *startup.Trace) jssink.Config {
	maxSize, lastSeq := streamLimits(stream)
	return jssink.Config{
		Subject:           c.Subject,
		DeadLetterSubject: c.DeadLetterSubject,
		Window:            c.Window,
		WindowBytes:       c.WindowBytes,
		AckTimeout:        c.AckTimeout,
		MaxMessageSize:    maxSize,
		Stream:            stream,
		StartSeq:          lastSeq,
		RecordDeadLetter:  recordDeadLetter(store),
		Source:            source,
		FirstStored:       func() { trace.Finish("first PubAck") },
	}
}
