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
	// Table is the outbox table, the first of several when MoreTables
	// names others: the relay's record, its take-up lock and its dead
	// letters are kept in its schema.
	Table contract.Table
	// MoreTables are further outbox tables read on the same slot, through
	// the same publication, in the same pass over the WAL: one walsender
	// decodes the WAL once for all of them. Their events carry their table
	// (the Outbox-Table header, {schema} and {table} in subjects), and
	// with several tables every event's id is qualified by its table
	// (schema.table/id: see contract.QualifiedID), since two tables may
	// hold the same id.
	MoreTables []contract.Table
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

// Tables returns every outbox table the relay reads, Table first.
func (c Config) Tables() []contract.Table {
	return append([]contract.Table{c.Table}, c.MoreTables...)
}

// Validate names the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.PGURL == "":
		return replication.ErrNoConnString
	case c.Table.Name == "":
		return errors.New("relay: no outbox table")
	case hasDuplicate(c.Tables()):
		return fmt.Errorf("relay: tables %s: a table is named twice", contract.JoinTables(c.Tables()))
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

func hasDuplicate(tables []contract.Table) bool {
	seen := map[contract.Table]bool{}
	for _, t := range tables {
		if seen[t] {
			return true
		}
		seen[t] = true
	}
	return false
}
