package relay

import (
	"context"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// TableSource is what the messages of cfg's tables name as their source:
// their Postgres system, database and table (for a relay of several
// tables, all of them: sink.Source.Table), and the relay's slot for
// messages of older relays. Operator commands read a shared stream back
// through it (verify, status), leaving other tables', databases' and
// clusters' messages out. A role that may not read pg_control_system()
// gets an error and the zero source, which takes every relay's messages
// for the tables'.
func TableSource(ctx context.Context, db replication.Querier, cfg Config) (sink.Source, error) {
	system, database, err := replication.Identify(ctx, db)
	if err != nil {
		return sink.Source{}, err
	}
	return sink.Source{System: system, Database: database, Table: contract.JoinTables(cfg.Tables()), Slot: cfg.Slot}, nil
}
