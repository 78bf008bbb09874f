// Command outbox-relay publishes the rows inserted into a Postgres outbox
// table to a NATS JetStream stream, reading them from the write-ahead log
// through a logical replication slot, and confirms WAL to Postgres only
// after JetStream acknowledged every event before it.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/outbox-relay/outbox-relay/internal/startup"
)

type cli struct {
	Log     logFlags         `embed:""`
	Version kong.VersionFlag `name:"version" help:"Print the version (module version, VCS revision, Go version) and exit."`

	Run          runCmd     `cmd:"" help:"Run the relay: stream outbox inserts from the WAL to JetStream, or with --source poll read them from the table in batches."`
	Migrate      migrateCmd `cmd:"" help:"Create the outbox table, the relay's records, the dead-letter view and the publication (idempotent)."`
	Status       statusCmd  `cmd:"" help:"Show the slot (with --source poll, the pending rows), its lag and the last event in the stream."`
	devCommand   `embed:""` // lab.go; a hidden stand-in in the production build (nolab.go)
	Verify       verifyCmd  `cmd:"" help:"Compare the table with the stream: missing, extra, duplicated and reordered events; exits 1 on any."`
	Replay       replayCmd  `cmd:"" help:"Republish the rows committed in a time range, in commit order, as marked copies, for consumers that rebuild (docs/writing-and-consuming.md)."`
	DLQ          dlqCmd     `cmd:"" name:"dlq" help:"See and retry dead-lettered events."`
	benchCommand `embed:""` // lab.go; a hidden stand-in in the production build (nolab.go)
	Doctor       doctorCmd  `cmd:"" help:"Check that Postgres and NATS are set up for the relay (with --source poll, for the polling relay); prints each problem with its fix, exits 1 on any error."`
	Cleanup      cleanupCmd `cmd:"" help:"Delete, in batches, rows older than --retention whose events the slot has confirmed; mark processed_at; drop old partitions."`

	Healthcheck healthcheckCmd `cmd:"" help:"Ask a running relay's /readyz (or /healthz with --live) and exit 0 when it answers 200: a container healthcheck."`
}

const description = `Publishes every committed insert of a Postgres outbox table to a NATS
JetStream stream, in commit order, with the row id as Nats-Msg-Id. Reads the
write-ahead log through a dedicated logical replication slot and confirms it
to Postgres only after JetStream acknowledged the events: nothing committed
is lost, nothing rolled back is published. Where logical replication is not
available, run --source poll reads the table in batches instead (docs/polling.md).`

// vars are the values the flags' ${…} defaults and help texts name.
func vars() kong.Vars {
	v := defaults()
	for name, value := range cleanupDefaults() {
		v[name] = value
	}
	v["version"] = buildinfo.Read().String()
	return v
}

func main() {
	began := time.Now()
	// Run as the nats-server process of bench and the tests, when asked
	// (the lab build only).
	serveNATSIfAsked()
	k, logs := parseArgs(os.Args[1:])
	log := logs.logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The run command's start-up, timed from here (see docs/performance-drain.md).
	trace := startup.New(began, log.With().Str("component", "startup").Logger())
	trace.Since("cli", began)
	ctx = startup.NewContext(ctx, trace)
	k.BindTo(ctx, (*context.Context)(nil))
	err := k.Run(log)
	if err != nil {
		report(log, err)
		os.Exit(exitCode(err))
	}
}

// kongOptions are the CLI's, for the whole CLI and for runOnlyCLI alike.
func kongOptions() []kong.Option {
	return []kong.Option{
		kong.Name("outbox-relay"),
		kong.Description(description),
		kong.UsageOnError(),
		vars(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.ValueFormatter(helpValue),
		// Flag errors exit 2, the usual code for a usage error (kong's own
		// is 80), as doctor and status document.
		kong.Exit(func(code int) {
			if code == 80 {
				code = exitUsage
			}
			os.Exit(code)
		}),
	}
}

// helpValue is a flag's help as kong writes it, with a bool flag's
// default (kong shows none): "(default: false)".
func helpValue(v *kong.Value) string {
	help := kong.DefaultHelpValueFormatter(v)
	if !v.IsBool() || v.Name == "help" || v.Name == "version" {
		return help
	}
	def := cmp.Or(v.Default, "false")
	if strings.HasSuffix(help, ".") {
		return help[:len(help)-1] + " (default: " + def + ")."
	}
	return help + " (default: " + def + ")"
}

// runOnlyCLI is the CLI with the run command alone. Building the whole CLI
// costs kong ~10 ms of CPU (it interpolates every flag's texts of every
// command with a regexp), a tenth of the relay's start-up (issue 9):
// `run` is parsed with this one first. Help, and any parse error, go
// through the whole CLI, so that what users see does not change.
type runOnlyCLI struct {
	Log     logFlags         `embed:""`
	Version kong.VersionFlag `name:"version" help:"Print the version (module version, VCS revision, Go version) and exit."`
	Run     runCmd           `cmd:"" help:"Run the relay."`
}

// parseArgs parses the command line and returns the command to run and
// the logging flags.
func parseArgs(args []string) (*kong.Context, logFlags) {
	if len(args) > 0 && args[0] == "run" && !slices.ContainsFunc(args, isHelpFlag) {
		var r runOnlyCLI
		if p, err := kong.New(&r, kongOptions()...); err == nil {
			if k, err := p.Parse(args); err == nil {
				return k, r.Log
			}
		}
	}
	var c cli
	parser, err := kong.New(&c, kongOptions()...)
	if err != nil {
		panic(err) // the CLI's own definition is wrong: as kong.Parse does
	}
	k, err := parser.Parse(args)
	parser.FatalIfErrorf(err)
	return k, c.Log
}

// isHelpFlag reports whether arg asks for help or the version, also in
// kong's --flag=value form (`--help=true`).
func isHelpFlag(arg string) bool {
	name, _, _ := strings.Cut(arg, "=")
	return name == "-h" || name == "--help" || name == "--version"
}

// Exit codes of the operator commands (doctor, status): 0 all is well,
// 1 a problem found, 2 a usage error or a server that cannot be reached.
const (
	exitProblem = 1
	exitUsage   = 2
)

// exitError carries a command's exit code; its message, when empty, was
// already printed (the command's report says it all).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

// withExit gives err the exit code code; a nil err means the command
// already said why.
func withExit(code int, err error) error { return &exitError{code: code, err: err} }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// repairAdvice is the way back from a gap, said once for every library
// error that wraps contract.ErrGap.
const repairAdvice = "start the relay once with --recreate-slot: it creates a new slot and, from its snapshot, publishes every committed row the stream lacks (checked by id; narrow it with --repair-since), then streams"

// report prints a fatal error once, with what to do about it. The log line
// is the only one: a FatalError's message already holds its hint.
func report(log zerolog.Logger, err error) {
	var ee *exitError
	if err == errProblems || (errors.As(err, &ee) && ee.err == nil) {
		return // the command printed its report
	}
	var fe *contract.FatalError
	fatal := errors.As(err, &fe)
	switch {
	case errors.Is(err, contract.ErrGap):
		log.Error().Err(err).Str("fix", repairAdvice).Msg("cannot continue")
	case fatal:
		log.Error().Err(err).Msg("cannot continue")
	default:
		log.Error().Err(err).Msg("stopped")
	}
}
