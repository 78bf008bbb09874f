package main

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// Values of --format.
const (
	formatOutbox      = "outbox"
	formatCloudEvents = "cloudevents"
)

// formatFlags choose the form of event messages: run's, dev's, and that
// of the commands that publish rows again (verify --republish, dlq retry),
// which should match the relay's.
type formatFlags struct {
	Format   string `name:"format" env:"OUTBOX_FORMAT" default:"outbox" enum:"outbox,cloudevents" help:"Form of event messages: outbox (the relay's headers, unchanged) or cloudevents (CloudEvents 1.0 in binary content mode, NATS binding: ce- attributes added, the event's headers as extensions). Dead letters keep the outbox form. See docs/setup.md."`
	CESource string `name:"ce-source" env:"OUTBOX_CE_SOURCE" help:"With --format cloudevents, every event's ce-source (a URI reference); default /postgres/<database>/<schema.table>, the database being --pg-url's."`
}

// parse gives the form the jetstream package takes. The default ce-source
// names the database pgURL connects to, as the relay's Outbox-Source-Database
// does.
func (f formatFlags) parse(pgURL string, table contract.Table, more ...contract.Table) (jetstream.Format, error) {
	if f.Format != formatCloudEvents {
		if f.CESource != "" {
			return jetstream.Format{}, fmt.Errorf("--ce-source is set but --format is %s: it applies to --format %s only", f.Format, formatCloudEvents)
		}
		return jetstream.Format{}, nil
	}
	format := jetstream.Format{CloudEvents: true, CESource: f.CESource}
	if format.CESource == "" {
		_, repl, err := replication.ParseConnString(pgURL)
		if err != nil {
			return format, fmt.Errorf("--format %s: name the database in the default ce-source: %w", formatCloudEvents, err)
		}
		format = jetstream.DefaultCloudEvents(repl.Database, table, more...)
	}
	if err := format.Validate(); err != nil {
		return format, fmt.Errorf("--ce-source: %w", err)
	}
	return format, nil
}
