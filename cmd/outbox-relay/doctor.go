package main

import (
	"context"
	"os"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/doctor"
)

type doctorCmd struct {
	pgFlags        `embed:""`
	primaryFlags   `embed:""`
	natsFlags      `embed:""`
	nameFlags      `embed:"" set:"duplicate_window_help=The relay's --duplicate-window: the window a stream the relay creates gets."`
	streamFlags    `embed:""`
	MaxOutage      time.Duration `name:"max-outage" env:"OUTBOX_MAX_OUTAGE" default:"${max_outage}" help:"Longest NATS outage to tolerate without duplicates: the stream's duplicate window must be at least this."`
	StatusInterval time.Duration `name:"status-interval" env:"OUTBOX_STATUS_INTERVAL" default:"${status_interval}" help:"The relay's --status-interval, compared with wal_sender_timeout."`
	pollFlags      `embed:""`
	Notify         bool          `name:"notify" help:"With --source poll: the NOTIFY trigger (migrate --notify) must be there."`
	AckTimeout     time.Duration `name:"ack-timeout" env:"OUTBOX_ACK_TIMEOUT" default:"${ack_timeout}" help:"With --source poll: the relay's --ack-timeout, which with --poll-interval the duplicate window must cover."`
	FailOnWarn     bool          `name:"fail-on-warn" help:"Exit 1 on warnings too."`
	JSON           bool          `name:"json" help:"Print JSON instead of text."`
}

// AfterApply reads the connection strings given in files (see
// runCmd.AfterApply).
func (c *doctorCmd) AfterApply() error {
	if err := c.pgFlags.AfterApply(); err != nil {
		return err
	}
	return c.primaryFlags.readFile()
}

// Run checks Postgres and NATS and prints every finding. Exit codes: 0 no
// error (warnings allowed unless --fail-on-warn), 1 an error found, 2 a
// usage error or a server that cannot be reached.
func (c *doctorCmd) Run(ctx context.Context, log zerolog.Logger) error {
	n, err := c.nameFlags.parse()
	if err != nil {
		return withExit(exitUsage, err)
	}
	settings, err := c.streamFlags.settings()
	if err != nil {
		return withExit(exitUsage, err)
	}
	if c.Source == sourcePoll {
		if err := c.pollFlags.validate(); err != nil {
			return withExit(exitUsage, err)
		}
		if err := n.oneTable("doctor --source poll", pollOneTable); err != nil {
			return withExit(exitUsage, err)
		}
		if c.PrimaryURL != "" {
			return withExit(exitUsage, errPrimaryWithPoll)
		}
	}
	var rep doctor.Report
	unreachable := false
	var payload doctor.PGSummary
	if pool, err := pingPool(ctx, c.PGURL); err != nil {
		unreachable = true
		rep.Add(doctor.Finding{Check: "postgres.connect", Severity: doctor.Error, Message: err.Error(), Fix: "check --pg-url (host, port, user, password, database) and that Postgres accepts this client (pg_hba.conf)"})
	} else {
		fs, sum, err := c.checkPostgres(ctx, pool, n)
		pool.Close()
		if err != nil {
			fs = []doctor.Finding{{Check: "postgres.read", Severity: doctor.Error, Message: err.Error()}}
		}
		rep.Add(fs...)
		payload = sum
	}
	if !unreachable {
		fs, down := doctor.CheckStandby(ctx, doctor.StandbyOptions{PGURL: c.PGURL, PrimaryURL: c.PrimaryURL, Slot: n.slot})
		rep.Add(fs...)
		unreachable = down
	}
	if nc, err := jetstream.ConnectNATSOnce(ctx, c.natsFlags.options(), "outbox-relay doctor"); err != nil {
		unreachable = true
		rep.Add(doctor.Finding{Check: "nats.connect", Severity: doctor.Error, Message: err.Error(), Fix: "check --nats-url and the credential and TLS flags (--nats-creds, --nats-nkey, --nats-ca, --nats-cert, --nats-key)"})
	} else {
		spec := jetstream.StreamSpec{Name: n.stream, Template: n.subject, DeadLetterSubject: n.deadLetter, DuplicateWindow: n.duplicateWindow, StreamSettings: settings}
		o := doctor.NATSOptions{Stream: spec, MaxOutage: c.MaxOutage, Payload: payload}
		if c.Source == sourcePoll {
			o.Poll = &doctor.PollTiming{Interval: c.PollInterval, AckTimeout: c.AckTimeout}
		}
		fs, err := doctor.CheckNATS(ctx, nc, o)
		nc.Close()
		if err != nil {
			fs = []doctor.Finding{{Check: "nats.read", Severity: doctor.Error, Message: err.Error()}}
		}
		rep.Add(fs...)
	}
	if c.JSON {
		if err := printJSON(rep); err != nil {
			return err
		}
	} else {
		rep.Print(os.Stdout)
	}
	switch {
	case unreachable:
		return withExit(exitUsage, nil)
	case rep.Failed(c.FailOnWarn):
		return withExit(exitProblem, nil)
	}
	return nil
}

// checkPostgres runs the checks of the relay --source chooses.
func (c *doctorCmd) checkPostgres(ctx context.Context, pool *pgxpool.Pool, n names) ([]doctor.Finding, doctor.PGSummary, error) {
	if c.Source == sourcePoll {
		return doctor.CheckPostgresPoll(ctx, pool, doctor.PollOptions{Table: n.table, Slot: n.slot, Notify: c.Notify, Batch: c.PollBatch, MaxOutage: c.MaxOutage})
	}
	return doctor.CheckPostgres(ctx, pool, doctor.PGOptions{Table: n.table, MoreTables: n.more, Publication: n.publication, Slot: n.slot, StatusInterval: c.StatusInterval})
}
