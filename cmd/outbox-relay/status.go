package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/inspect"
)

type statusCmd struct {
	pgFlags      `embed:""`
	natsFlags    `embed:""`
	nameFlags    `embed:""`
	JSON         bool              `name:"json" help:"Print JSON instead of text."`
	MaxLagBytes  contract.ByteSize `name:"max-lag-bytes" default:"0" help:"Exit 1 when the slot holds more unconfirmed WAL than this (e.g. 1GiB, 500MB; 0: not checked)."`
	MaxLagAge    time.Duration     `name:"max-lag-age" help:"Exit 1 when the relay confirms WAL later than this after Postgres wrote it (pg_stat_replication.flush_lag; 0: not checked); with --source poll, when the oldest pending row is older."`
	Source       string            `name:"source" env:"OUTBOX_SOURCE" default:"wal" enum:"wal,poll" help:"poll: report the table's pending rows (run --source poll) instead of the slot."`
	FailInactive bool              `name:"fail-inactive" help:"Exit 1 when no relay streams from the slot."`
	MaxInactive  time.Duration     `name:"max-inactive" help:"With --fail-inactive, only once the slot has been inactive this long (Postgres 17+ says since when; earlier versions fail at once)."`
	Watch        bool              `name:"watch" short:"w" help:"Refresh every --interval until Ctrl-C: a live view on a terminal, one line per interval otherwise."`
	Interval     time.Duration     `name:"interval" default:"1s" help:"Refresh interval of --watch."`
}

// Run prints the slot's and the stream's state. Exit codes: 0 no problem,
// 1 a problem (slot missing, lost or about to be, stream missing, a limit
// exceeded), 2 a usage error or a server that cannot be reached.
func (c *statusCmd) Run(ctx context.Context, log zerolog.Logger) error {
	n, err := c.nameFlags.parse()
	if err != nil {
		return withExit(exitUsage, err)
	}
	if c.Source == sourcePoll {
		if err := n.oneTable("status --source poll", pollOneTable); err != nil {
			return withExit(exitUsage, err)
		}
	}
	if c.Watch && c.JSON {
		return withExit(exitUsage, errors.New("--watch draws a view or prints lines; it has no --json"))
	}
	if c.Interval < 100*time.Millisecond {
		return withExit(exitUsage, fmt.Errorf("--interval %s: use at least 100ms", c.Interval))
	}
	pool, err := pingPool(ctx, c.PGURL)
	if err != nil {
		return withExit(exitUsage, err)
	}
	defer pool.Close()
	if c.Watch {
		return c.watch(ctx, pool, n)
	}
	nc, natsErr := jetstream.ConnectNATSOnce(ctx, c.natsFlags.options(), "outbox-relay status")
	if nc != nil {
		defer nc.Close()
	}
	r, err := inspect.Collect(ctx, pool, nc, c.options(n))
	if err != nil {
		return withExit(exitUsage, err)
	}
	if natsErr != nil {
		r.StreamError = natsErr.Error()
	}
	if c.JSON {
		if err := printJSON(r); err != nil {
			return err
		}
	} else {
		printStatus(os.Stdout, r)
	}
	switch {
	case natsErr != nil:
		return withExit(exitUsage, nil)
	case len(r.Problems) > 0:
		return withExit(exitProblem, nil)
	}
	return nil
}

// options are what status reads, and its limits.
func (c *statusCmd) options(n names) inspect.Options {
	return inspect.Options{Relay: n.relayConfig(), Poll: c.Source == sourcePoll,
		Limits: doctor.SlotLimits{MaxLagBytes: int64(c.MaxLagBytes), MaxLagAge: c.MaxLagAge, FailInactive: c.FailInactive, MaxInactive: c.MaxInactive}}
}

// printStatus prints r as text.
func printStatus(w io.Writer, r inspect.Report) {
	p := func(k, format string, args ...any) { fmt.Fprintf(w, "%-18s %s\n", k, fmt.Sprintf(format, args...)) }
	switch {
	case r.Poll != nil:
		p("pending", "%s", r.Poll.Line())
	case !r.Exists:
		p("slot", "%s (does not exist yet: `outbox-relay run` creates it)", r.Slot)
	default:
		p("slot", "%s", r.Slot)
		if r.Active {
			p("active", "yes, pid %d", r.ActivePID)
		} else {
			p("active", "no (no relay is streaming)")
		}
		p("confirmed_flush", "%s", r.ConfirmedFlush)
		p("lag", "%s (%d bytes)", doctor.HumanBytes(r.LagBytes), r.LagBytes)
		if r.FlushLagSeconds != nil {
			p("flush lag", "%.3fs", *r.FlushLagSeconds)
		}
		p("wal_status", "%s", r.WALStatus)
	}
	if r.Record != nil {
		p("record", "created at %s, confirm limit %s, initial rows published: %v", r.Record.CreatedLSN, r.Record.Limit, r.Record.Bootstrapped)
	}
	if r.DeadLettersPending != nil {
		p("dead letters", "%d not retried", *r.DeadLettersPending)
	}
	if r.StreamError != "" {
		p("stream", "%s: %s", r.Stream, r.StreamError)
	} else {
		p("stream", "%s, %d messages", r.Stream, r.StreamMessages)
		if e := r.LastEvent; e != nil {
			kind := "event"
			if e.DeadLetter {
				kind = "dead letter"
			}
			p("last event", "%s %s on %s, seq %d, commit %s, stored %s", kind, e.ID, e.Subject, e.Seq, e.Position.CommitLSN, e.Time.UTC().Format(time.RFC3339Nano))
		} else {
			p("last event", "none yet")
		}
	}
	if b := r.Blocked; b != nil {
		p("no room", "%s: %s", b.Reason, b.What)
		p("fix", "%s", b.Fix)
	}
	for _, o := range r.OtherSlots {
		p("other slot", "%s", otherSlotLine(o))
	}
	for _, pr := range r.Problems {
		p("PROBLEM", "%s", pr)
	}
}

// otherSlotLine describes another slot recorded in the records table.
func otherSlotLine(o checkpoint.OtherSlot) string {
	table := o.Table
	if table == "" {
		table = "table not recorded"
	}
	switch {
	case !o.Exists:
		return fmt.Sprintf("%s (%s): recorded, does not exist", o.Slot, table)
	case o.Active:
		return fmt.Sprintf("%s (%s): active, pid %d", o.Slot, table, o.ActivePID)
	}
	return fmt.Sprintf("%s (%s): idle, keeps %s of WAL", o.Slot, table, doctor.HumanBytes(o.RetainedBytes))
}
