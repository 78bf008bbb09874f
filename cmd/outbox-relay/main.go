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
	"strings"
	"syscall"

	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/natsproc"
	"github.com/outbox-relay/outbox-relay/replication"
)

type cli struct {
	Log     logFlags         `embed:""`
	Version kong.VersionFlag `name:"version" help:"Print the version (module version, VCS revision, Go version) and exit."`

	Run     runCmd     `cmd:"" help:"Run the relay: stream outbox inserts from the WAL to JetStream."`
	Migrate migrateCmd `cmd:"" help:"Create the outbox table, the relay's records, the dead-letter view and the publication (idempotent)."`
	Status  statusCmd  `cmd:"" help:"Show the slot, its lag and the last event in the stream."`
	Dev     devCmd     `cmd:"" help:"Run everything locally: embedded NATS, a throwaway Postgres, the relay and demo orders."`
	Verify  verifyCmd  `cmd:"" help:"Compare the table with the stream: missing, extra, duplicated and reordered events; exits 1 on any."`
	DLQ     dlqCmd     `cmd:"" name:"dlq" help:"See and retry dead-lettered events."`
	Bench   benchCmd   `cmd:"" help:"Measure throughput, latency and resources against the machine's limits, in one run."`
}

const description = `Publishes every committed insert of a Postgres outbox table to a NATS
JetStream stream, in commit order, with the row id as Nats-Msg-Id. Reads the
write-ahead log through a dedicated logical replication slot and confirms it
to Postgres only after JetStream acknowledged the events: nothing committed
is lost, nothing rolled back is published.`

func main() {
	// Run as the nats-server process of bench and the tests, when asked.
	natsproc.ServeIfAsked()
	var c cli
	k := kong.Parse(&c,
		kong.Name("outbox-relay"),
		kong.Description(description),
		kong.UsageOnError(),
		defaults(),
		kong.Vars{"version": readBuildInfo().String()},
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

// repairAdvice is the way back from a gap, said once for every library
// error that wraps replication.ErrGap.
const repairAdvice = "start the relay once with --recreate-slot: it creates a new slot and, from its snapshot, publishes every committed row the stream lacks (checked by id; narrow it with --repair-since), then streams"

// report prints a fatal error with what to do about it.
func report(log zerolog.Logger, err error) {
	var fe *replication.FatalError
	fix := ""
	if errors.As(err, &fe) {
		fix = fe.Hint
	}
	if errors.Is(err, replication.ErrGap) {
		if fix == "" {
			fix = repairAdvice
		} else {
			fix = strings.TrimSuffix(fix, ".") + "; then " + repairAdvice
		}
	}
	switch {
	case err == errProblems: // verify printed its report; a wrapped one has more to say
		return
	case fix != "":
		log.Error().Err(err).Str("fix", fix).Msg("cannot continue")
		fmt.Fprintln(os.Stderr, "outbox-relay:", err.Error()+": "+fix)
		return
	default:
		log.Error().Err(err).Msg("stopped")
	}
	fmt.Fprintln(os.Stderr, "outbox-relay:", err)
}
