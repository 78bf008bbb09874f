package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

type statusCmd struct {
	pgFlags      `embed:""`
	natsFlags    `embed:""`
	nameFlags    `embed:""`
	JSON         bool          `name:"json" help:"Print JSON instead of text."`
	MaxLagBytes  int64         `name:"max-lag-bytes" help:"Exit 1 when the slot holds more unconfirmed WAL than this many bytes (0: not checked)."`
	MaxLagAge    time.Duration `name:"max-lag-age" help:"Exit 1 when the relay confirms WAL later than this after Postgres wrote it (pg_stat_replication.flush_lag; 0: not checked); with --source poll, when the oldest pending row is older."`
	Source       string        `name:"source" env:"OUTBOX_SOURCE" default:"wal" enum:"wal,poll" help:"poll: report the table's pending rows (run --source poll) instead of the slot."`
	FailInactive bool          `name:"fail-inactive" help:"Exit 1 when no relay streams from the slot."`
	MaxInactive  time.Duration `name:"max-inactive" help:"With --fail-inactive, only once the slot has been inactive this long (Postgres 17+ says since when; earlier versions fail at once)."`
	Watch        bool          `name:"watch" short:"w" help:"Refresh every --interval until Ctrl-C: a live view on a terminal, one line per interval otherwise."`
	Interval     time.Duration `name:"interval" default:"1s" help:"Refresh interval of --watch."`
}

// statusReport is what `status` prints.
type statusReport struct {
	Slot               string             `json:"slot"`
	Exists             bool               `json:"exists"`
	Active             bool               `json:"active"`
	ActivePID          int32              `json:"active_pid,omitempty"`
	ConfirmedFlush     string             `json:"confirmed_flush_lsn,omitempty"`
	LagBytes           int64              `json:"lag_bytes"`
	FlushLagSeconds    *float64           `json:"flush_lag_seconds,omitempty"`
	WALStatus          string             `json:"wal_status,omitempty"`
	InactiveSince      *time.Time         `json:"inactive_since,omitempty"`
	Record             *checkpoint.Record `json:"record,omitempty"`
	DeadLettersPending *int64             `json:"dead_letters_not_retried,omitempty"`
	Stream             string             `json:"stream"`
	StreamMessages     uint64             `json:"stream_messages"`
	StreamLastSeq      uint64             `json:"stream_last_seq"`
	StreamError        string             `json:"stream_error,omitempty"`
	LastEvent          *sink.StoredEvent  `json:"last_event,omitempty"`
	// Poll replaces the slot's fields with --source poll.
	Poll *pollStatus `json:"poll,omitempty"`
	// Problems make status exit 1.
	Problems []string `json:"problems,omitempty"`
}

// Run prints the slot's and the stream's state. Exit codes: 0 no problem,
// 1 a problem (slot missing, lost or about to be, stream missing, a limit
// exceeded), 2 a usage error or a server that cannot be reached.
func (c *statusCmd) Run(ctx context.Context, log zerolog.Logger) error {
	n, err := c.nameFlags.parse()
	if err != nil {
		return withExit(exitUsage, err)
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
	nc, natsErr := relay.ConnectNATSOnce(ctx, c.natsFlags.options(), "outbox-relay status")
	if nc != nil {
		defer nc.Close()
	}
	r, err := c.collect(ctx, pool, nc, n)
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
		r.print(os.Stdout)
	}
	switch {
	case natsErr != nil:
		return withExit(exitUsage, nil)
	case len(r.Problems) > 0:
		return withExit(exitProblem, nil)
	}
	return nil
}

func (c *statusCmd) limits() doctor.SlotLimits {
	return doctor.SlotLimits{MaxLagBytes: c.MaxLagBytes, MaxLagAge: c.MaxLagAge, FailInactive: c.FailInactive, MaxInactive: c.MaxInactive}
}

// collect reads the slot and, when nc is given, the stream; an error means
// Postgres could not be read.
func (c *statusCmd) collect(ctx context.Context, pool *pgxpool.Pool, nc *nats.Conn, n names) (statusReport, error) {
	r := statusReport{Slot: n.slot, Stream: n.stream}
	read := c.readSlot
	if c.Source == sourcePoll {
		r.Slot = ""
		read = c.readPoll
	}
	if err := read(ctx, pool, n, &r); err != nil {
		return r, err
	}
	var pending int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{n.table.Schema, checkpoint.DeadLettersTable}.Sanitize()+` WHERE retried_at IS NULL`).Scan(&pending); err == nil {
		r.DeadLettersPending = &pending
	}
	if nc != nil {
		readStream(ctx, nc, n, &r)
	}
	return r, nil
}

// readSlot fills in the slot's side of r.
func (c *statusCmd) readSlot(ctx context.Context, pool *pgxpool.Pool, n names, r *statusReport) error {
	slot, err := replication.LookupSlot(ctx, pool, n.slot)
	if err != nil {
		return err
	}
	health, err := replication.ReadSlotHealth(ctx, pool, n.slot)
	if err != nil {
		return err
	}
	r.Exists, r.Active, r.ActivePID, r.LagBytes, r.WALStatus = slot.Exists, slot.Active, slot.ActivePID, slot.LagBytes, slot.WALStatus
	if slot.Exists {
		r.ConfirmedFlush = slot.ConfirmedFlush.String()
	}
	if health.HasFlushLag {
		s := health.FlushLag.Seconds()
		r.FlushLagSeconds = &s
	}
	if !health.InactiveSince.IsZero() {
		r.InactiveSince = &health.InactiveSince
	}
	if rec, err := checkpoint.NewStore(pool, n.table.Schema, n.slot).Load(ctx); err == nil && rec.Exists {
		r.Record = &rec
	}
	r.Problems = c.limits().SlotProblems(n.slot, slot, health, time.Now())
	return nil
}

// readStream fills in the stream's side; a missing stream is a problem,
// NATS being unreachable is said in StreamError.
func readStream(ctx context.Context, nc *nats.Conn, n names, r *statusReport) {
	if !nc.IsConnected() {
		r.StreamError = "not connected to NATS"
		if err := nc.LastError(); err != nil {
			r.StreamError += ": " + err.Error()
		}
		return
	}
	js, err := jetstream.New(nc)
	if err != nil {
		r.StreamError = err.Error()
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := js.Stream(sctx, n.stream)
	if err != nil {
		r.StreamError = err.Error()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			r.Problems = append(r.Problems, fmt.Sprintf("stream %q does not exist: the relay creates it at start", n.stream))
		}
		return
	}
	state := stream.CachedInfo().State
	r.StreamMessages, r.StreamLastSeq = state.Msgs, state.LastSeq
	if r.LastEvent, err = sink.LastEvent(sctx, stream, n.subject.Filter(), n.deadLetter); err != nil {
		r.StreamError = err.Error()
	}
}

func (r statusReport) print(w io.Writer) {
	p := func(k, format string, args ...any) { fmt.Fprintf(w, "%-18s %s\n", k, fmt.Sprintf(format, args...)) }
	switch {
	case r.Poll != nil:
		p("pending", "%s", r.Poll.line())
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
	for _, pr := range r.Problems {
		p("PROBLEM", "%s", pr)
	}
}
