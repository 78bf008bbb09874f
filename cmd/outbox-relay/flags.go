package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/alecthomas/kong"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/progress"
	"github.com/outbox-relay/outbox-relay/poll"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Flag groups shared by the commands. Every flag has an environment
// variable; the names are a contract users' scripts rely on.

type logFlags struct {
	LogLevel  string `name:"log-level" env:"OUTBOX_LOG_LEVEL" default:"info" enum:"debug,info,warn,error" help:"Log level: debug, info, warn, error."`
	LogFormat string `name:"log-format" env:"OUTBOX_LOG_FORMAT" default:"auto" enum:"auto,json,console" help:"Log format: json, console, or auto (console on a terminal, json otherwise)."`
}

func (f logFlags) logger() zerolog.Logger {
	level, err := zerolog.ParseLevel(f.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	var log zerolog.Logger
	console := f.LogFormat == "console" || (f.LogFormat == "auto" && isatty.IsTerminal(os.Stderr.Fd()))
	if console {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"})
	} else {
		log = zerolog.New(os.Stderr)
	}
	return log.Level(level).With().Timestamp().Logger()
}

// progressTo shows the progress of a command's long work: a bar when
// stderr is a terminal, log lines otherwise.
func progressTo(log zerolog.Logger) progress.Reporter {
	if isatty.IsTerminal(os.Stderr.Fd()) {
		return progress.NewBar(os.Stderr)
	}
	return progress.Log(log)
}

type pgFlags struct {
	PGURL     string `name:"pg-url" env:"OUTBOX_PG_URL" help:"${pg_url_help}"`
	PGURLFile string `name:"pg-url-file" env:"OUTBOX_PG_URL_FILE" help:"File holding the Postgres connection string (a mounted secret), instead of --pg-url."`
}

// AfterApply reads --pg-url-file (kong calls it once flags are parsed), so
// that a password can come from a mounted secret rather than the
// environment.
func (f *pgFlags) AfterApply() error {
	if f.PGURLFile == "" {
		return nil
	}
	if f.PGURL != "" {
		return errors.New("--pg-url (OUTBOX_PG_URL) and --pg-url-file (OUTBOX_PG_URL_FILE) are both set: keep one")
	}
	b, err := os.ReadFile(f.PGURLFile)
	if err != nil {
		return fmt.Errorf("--pg-url-file: %w", err)
	}
	if f.PGURL = strings.TrimSpace(string(b)); f.PGURL == "" {
		return fmt.Errorf("--pg-url-file %s is empty: it should hold the connection string", f.PGURLFile)
	}
	return nil
}

// primaryFlags name the primary of a standby --pg-url points at: the
// relay then reads the standby's slot and keeps its record on the primary
// (docs/standby.md).
type primaryFlags struct {
	PrimaryURL     string `name:"primary-url" env:"OUTBOX_PRIMARY_URL" help:"Read from a hot standby (Postgres 16+): --pg-url names the standby, where the slot lives and is read; this names its primary, where the relay keeps its record (take-up, confirm limit, dead letters). See docs/standby.md."`
	PrimaryURLFile string `name:"primary-url-file" env:"OUTBOX_PRIMARY_URL_FILE" help:"File holding --primary-url's connection string (a mounted secret), instead of --primary-url."`
}

// readFile reads --primary-url-file, as pgFlags.AfterApply does
// --pg-url-file (runCmd.AfterApply calls both: kong finds one promoted
// AfterApply only).
func (f *primaryFlags) readFile() error {
	if f.PrimaryURLFile == "" {
		return nil
	}
	if f.PrimaryURL != "" {
		return errors.New("--primary-url (OUTBOX_PRIMARY_URL) and --primary-url-file (OUTBOX_PRIMARY_URL_FILE) are both set: keep one")
	}
	b, err := os.ReadFile(f.PrimaryURLFile)
	if err != nil {
		return fmt.Errorf("--primary-url-file: %w", err)
	}
	if f.PrimaryURL = strings.TrimSpace(string(b)); f.PrimaryURL == "" {
		return fmt.Errorf("--primary-url-file %s is empty: it should hold the connection string", f.PrimaryURLFile)
	}
	return nil
}

type natsFlags struct {
	NATSURL   string `name:"nats-url" env:"OUTBOX_NATS_URL" default:"nats://127.0.0.1:4222" help:"NATS server URLs, comma-separated."`
	NATSCreds string `name:"nats-creds" env:"OUTBOX_NATS_CREDS" help:"NATS credentials file (JWT and NKey seed)."`
	NATSNKey  string `name:"nats-nkey" env:"OUTBOX_NATS_NKEY" help:"NATS NKey seed file."`
	NATSCA    string `name:"nats-ca" env:"OUTBOX_NATS_CA" help:"CA certificate file to verify the NATS servers (TLS)."`
	NATSCert  string `name:"nats-cert" env:"OUTBOX_NATS_CERT" help:"Client certificate file for NATS mutual TLS."`
	NATSKey   string `name:"nats-key" env:"OUTBOX_NATS_KEY" help:"Client key file for NATS mutual TLS."`
}

// options are the flags as the relay package takes them.
func (f natsFlags) options() jetstream.NATSOptions {
	return jetstream.NATSOptions{URL: f.NATSURL, Creds: f.NATSCreds, NKey: f.NATSNKey, CA: f.NATSCA, Cert: f.NATSCert, Key: f.NATSKey}
}

type nameFlags struct {
	Slot              string        `name:"slot" env:"OUTBOX_SLOT" default:"${slot}" help:"${slot_help}"`
	Publication       string        `name:"publication" env:"OUTBOX_PUBLICATION" default:"${publication}" help:"Publication that contains the outbox table."`
	Table             []string      `name:"table" env:"OUTBOX_TABLE" default:"${table}" sep:"," help:"Outbox table, schema-qualified. Several (the flag repeated, or comma-separated) are relayed on one slot and publication, in one pass over the WAL; their ids are then qualified (schema.table/id): see docs/setup.md."`
	Stream            string        `name:"stream" env:"OUTBOX_STREAM" default:"${stream}" help:"${stream_help}"`
	Subject           string        `name:"subject" env:"OUTBOX_SUBJECT" default:"${subject}" help:"Subject template; placeholders {aggregate_type}, {aggregate_id}, {event_type} each fill one token (up to 8 with --subject-dots tokens)."`
	SubjectDots       string        `name:"subject-dots" env:"OUTBOX_SUBJECT_DOTS" default:"escape" enum:"escape,tokens" help:"How a placeholder renders a dotted value such as order.created: escape (one token, order%2Ecreated; the default, the subjects of earlier versions) or tokens (order.created, at most 8 tokens; the stream must then cover prefix.>). See docs/subjects-and-messages.md before switching."`
	DeadLetterSubject string        `name:"dead-letter-subject" env:"OUTBOX_DEAD_LETTER_SUBJECT" default:"${dead_letter_subject}" help:"Subject for events that can never be published as they are."`
	DuplicateWindow   time.Duration `name:"duplicate-window" env:"OUTBOX_DUPLICATE_WINDOW" default:"${duplicate_window}" help:"${duplicate_window_help}"`
}

// names is nameFlags parsed and validated.
type names struct {
	slot, publication string
	// table is the outbox table, the first of several when more names
	// others.
	table           contract.Table
	more            []contract.Table
	stream          string
	subject         sink.Template
	deadLetter      string
	duplicateWindow time.Duration
	// format is set by the commands that publish (formatFlags).
	format jetstream.Format
}

// relayConfig is the relay's configuration with these names.
func (n names) relayConfig() relay.Config {
	return relay.Config{Slot: n.slot, Publication: n.publication, Table: n.table, MoreTables: n.more, Publishing: n.publishing()}
}

// tables returns every table named, the first first.
func (n names) tables() []contract.Table { return append([]contract.Table{n.table}, n.more...) }

// oneTable refuses several tables for a command that reads one.
func (n names) oneTable(what, fix string) error {
	if len(n.more) == 0 {
		return nil
	}
	return fmt.Errorf("%s reads one outbox table and --table (OUTBOX_TABLE) names %d (%s): %s", what, len(n.more)+1, contract.JoinTables(n.tables()), fix)
}

// publishing is where events go with these names.
func (n names) publishing() core.Publishing {
	return core.Publishing{Stream: n.stream, Subject: n.subject, DeadLetterSubject: n.deadLetter, DuplicateWindow: n.duplicateWindow, Format: n.format}
}

func (f nameFlags) parse() (names, error) {
	n := names{slot: f.Slot, publication: f.Publication, stream: f.Stream, deadLetter: f.DeadLetterSubject, duplicateWindow: f.DuplicateWindow}
	var err error
	if err = replication.CheckName("slot", f.Slot); err != nil {
		return n, fmt.Errorf("--slot: %w", err)
	}
	if err = replication.CheckName("publication", f.Publication); err != nil {
		return n, fmt.Errorf("--publication: %w", err)
	}
	tables, err := contract.ParseTables(f.Table...)
	if err != nil {
		return n, fmt.Errorf("--table: %w", err)
	}
	n.table, n.more = tables[0], tables[1:]
	dots, err := sink.ParseDots(f.SubjectDots)
	if err != nil {
		return n, fmt.Errorf("--subject-dots: %w", err)
	}
	if n.subject, err = sink.ParseTemplate(f.Subject, sink.WithDots(dots)); err != nil {
		return n, fmt.Errorf("--subject: %w", err)
	}
	if err = sink.CheckSubject(f.DeadLetterSubject); err != nil {
		return n, fmt.Errorf("--dead-letter-subject: %w", err)
	}
	if sink.Covers(n.subject.Filter(), f.DeadLetterSubject) {
		return n, fmt.Errorf("--dead-letter-subject %q matches the event subjects %q: choose a subject outside them", f.DeadLetterSubject, n.subject.Filter())
	}
	if f.DuplicateWindow < 100*time.Millisecond {
		return n, fmt.Errorf("--duplicate-window %s: JetStream needs at least 100ms", f.DuplicateWindow)
	}
	return n, nil
}

// defaults are the flag defaults, taken from the packages that own them so
// that the CLI, dev and the libraries never disagree.
func defaults() kong.Vars {
	return kong.Vars{
		"slot":                contract.DefaultSlot,
		"publication":         contract.DefaultPublication,
		"table":               contract.DefaultTable.String(),
		"stream":              contract.DefaultStream,
		"subject":             contract.DefaultSubject,
		"dead_letter_subject": contract.DefaultDeadLetterSubject,
		"message_prefix":      contract.DefaultMessagePrefix,
		"metrics_addr":        contract.DefaultMetricsAddr,
		"duplicate_window":    shortDuration(jetstream.DefaultDuplicateWindow),
		"window":              strconv.Itoa(jetstream.DefaultWindow),
		"window_bytes":        contract.ByteSize(jetstream.DefaultWindowBytes).String(),
		"ack_timeout":         shortDuration(jetstream.DefaultAckTimeout),
		"status_interval":     shortDuration(replication.DefaultStatusInterval),
		"drain_timeout":       shortDuration(replication.DefaultDrainTimeout),
		"max_outage":          shortDuration(doctor.DefaultMaxOutage),
		"poll_batch":          strconv.Itoa(poll.DefaultBatch),
		"poll_interval":       shortDuration(poll.DefaultInterval),
		"poll_max_attempts":   strconv.Itoa(poll.DefaultMaxAttempts),
		"poll_backoff":        shortDuration(poll.DefaultBackoff),
		"poll_max_backoff":    shortDuration(poll.DefaultMaxBackoff),
		// The help of shared flags says what a read-only command does with
		// them; run, which creates the slot and the stream and derives the
		// replication connection, sets its own (runHelp).
		"pg_url_help":           "Postgres connection string (URL or key=value). Use sslmode=verify-full across networks.",
		"slot_help":             "The relay's logical replication slot.",
		"stream_help":           "The relay's JetStream stream.",
		"duplicate_window_help": "The relay's --duplicate-window; this command creates no stream and does not use it.",
	}
}

// shortDuration writes 2m rather than 2m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
