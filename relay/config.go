package relay

import (
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Config is everything the WAL relay needs to know: how it publishes
// (core.Publishing, shared with the polling relay) and where it reads.
// Zero durations and sizes take the defaults of the package that owns
// them (jetstream, replication).
type Config struct {
	core.Publishing

	// PGURL is an ordinary Postgres connection string; the replication
	// connection is derived from it.
	PGURL string
	// PrimaryURL, when set, names the primary where the relay keeps its
	// record (take-up record and lock, confirm limit, dead letters) while
	// PGURL names a hot standby (Postgres 16+) it streams from: the slot,
	// its snapshot and the slot's monitoring are there. See standby.go.
	PrimaryURL string

	Slot        string
	Publication string
	Table       contract.Table
	// MessagePrefix, when set, relays table-less events too: transactional
	// logical messages with this prefix (Postgres 14+; see decode).
	MessagePrefix string

	StatusInterval time.Duration // longest time between status updates

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
	case c.PrimaryURL != "" && c.Failover:
		return errors.New("relay: --failover with --primary-url: a slot on a standby cannot be a failover slot; drop one of them")
	}
	if err := c.Publishing.Validate(); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	if err := replication.CheckName("slot", c.Slot); err != nil {
		return fmt.Errorf("relay: slot: %w", err)
	}
	if err := replication.CheckName("publication", c.Publication); err != nil {
		return fmt.Errorf("relay: publication: %w", err)
	}
	return nil
}
