// Command outbox-relay publishes the rows inserted into a Postgres outbox
// table to a NATS JetStream stream, reading them from the write-ahead log
// through a logical replication slot, and confirms WAL to Postgres only
// after JetStream acknowledged every event before it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/replication"
)

type cli struct {
	Log logFlags `embed:""`

	Run     runCmd     `cmd:"" help:"Run the relay: stream outbox inserts from the WAL to JetStream."`
	Migrate migrateCmd `cmd:"" help:"Create the outbox table, the relay's records, the dead-letter view and the publication (idempotent)."`
	Status  statusCmd  `cmd:"" help:"Show the slot, its lag and the last event in the stream."`
	Dev     devCmd     `cmd:"" help:"Run everything locally: embedded NATS, a throwaway Postgres, the relay and demo orders."`
	Verify  verifyCmd  `cmd:"" help:"Compare the table with the stream: missing, extra, duplicated and reordered events; exits 1 on any."`
	DLQ     dlqCmd     `cmd:"" name:"dlq" help:"See and retry dead-lettered events."`
	Bench   benchCmd   `cmd:"" help:"Measure throughput, latency and resources against the machine's limits, in one run."`
	Natsd   natsdCmd   `cmd:"" hidden:"" help:"Run an embedded NATS server (used by bench)."`
}

const description = `Publishes every committed insert of a Postgres outbox table to a NATS
JetStream stream, in commit order, with the row id as Nats-Msg-Id. Reads the
write-ahead log through a dedicated logical replication slot and confirms it
to Postgres only after JetStream acknowledged the events: nothing committed
is lost, nothing rolled back is published.`

func main() {
	var c cli
	k := kong.Parse(&c,
		kong.Name("outbox-relay"),
		kong.Description(description),
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	)
	log := c.Log.logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	k.BindTo(ctx, (*context.Context)(nil))
	err := k.Run(log)
	if err != nil {
		report(log, err)
		os.Exit(1)
	}
}

// report prints a fatal error with what to do about it.
func report(log zerolog.Logger, err error) {
	var gap *checkpoint.GapError
	var fe *replication.FatalError
	switch {
	case err == errProblems: // verify printed its report: nothing to add
		return
	case errors.As(err, &gap):
		log.Error().Str("fix", gap.Fix).Msg(gap.What)
	case errors.As(err, &fe):
		log.Error().Err(fe.Err).Str("fix", fe.Hint).Msg("cannot continue")
	default:
		log.Error().Err(err).Msg("stopped")
	}
	fmt.Fprintln(os.Stderr, "outbox-relay:", err)
}
