package poll

import (
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Defaults of the Config fields left zero.
const (
	DefaultBatch       = 500
	DefaultInterval    = time.Second
	DefaultMaxAttempts = 5
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = 5 * time.Minute
)

// Config is what the polling relay needs: how it publishes (shared with
// the WAL relay), where it reads, and how it polls.
type Config struct {
	core.Publishing
	// PGURL is an ordinary Postgres connection string.
	PGURL string
	Table contract.Table
	// Slot names the WAL relay's slot, which must not exist (a WAL relay
	// never sets processed_at: polling would publish again every row it
	// published); the relay's records are kept under its name.
	Slot string
	// Batch is the most rows one transaction publishes.
	Batch int
	// Interval is the longest wait between two polls when nothing wakes
	// the relay: the fallback when NOTIFY is not installed or lost.
	Interval time.Duration
	// MaxAttempts is how many times a row the stream cannot take is tried
	// before it goes to the dead-letter subject.
	MaxAttempts int
	// Backoff is the wait after a row's first rejection, doubling up to
	// MaxBackoff.
	Backoff, MaxBackoff time.Duration
}

func (c *Config) setDefaults() {
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Backoff <= 0 {
		c.Backoff = DefaultBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
}

// Validate names the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.PGURL == "":
		return replication.ErrNoConnString
	case c.Table.Name == "":
		return errors.New("poll: no outbox table")
	}
	if err := c.Publishing.Validate(); err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	if err := replication.CheckName("slot", c.Slot); err != nil {
		return fmt.Errorf("poll: slot: %w", err)
	}
	switch {
	case c.Batch < 0 || c.Batch > 100_000:
		return fmt.Errorf("poll: batch %d: use 1 to 100000", c.Batch)
	case c.Interval < 0:
		return errors.New("poll: negative interval")
	case c.MaxAttempts < 0:
		return errors.New("poll: negative max attempts")
	case c.Backoff < 0 || c.MaxBackoff < 0:
		return errors.New("poll: negative backoff")
	}
	return nil
}
