package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

type statusCmd struct {
	pgFlags   `embed:""`
	natsFlags `embed:""`
	nameFlags `embed:""`
	JSON      bool `name:"json" help:"Print JSON instead of text."`
}

// statusReport is what `status` prints.
type statusReport struct {
	Slot           string             `json:"slot"`
	Exists         bool               `json:"exists"`
	Active         bool               `json:"active"`
	ActivePID      int32              `json:"active_pid,omitempty"`
	ConfirmedFlush string             `json:"confirmed_flush_lsn,omitempty"`
	LagBytes       int64              `json:"lag_bytes"`
	WALStatus      string             `json:"wal_status,omitempty"`
	Record         *checkpoint.Record `json:"record,omitempty"`
	Stream         string             `json:"stream"`
	StreamMessages uint64             `json:"stream_messages"`
	StreamError    string             `json:"stream_error,omitempty"`
	LastEvent      *sink.StoredEvent  `json:"last_event,omitempty"`
}

func (c *statusCmd) Run(ctx context.Context, log zerolog.Logger) error {
	n, err := c.nameFlags.parse()
	if err != nil {
		return err
	}
	poolCfg, _, err := replication.ParseConnString(c.PGURL)
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	slot, err := replication.LookupSlot(ctx, pool, n.slot)
	if err != nil {
		return err
	}
	r := statusReport{Slot: n.slot, Exists: slot.Exists, Active: slot.Active, ActivePID: slot.ActivePID,
		LagBytes: slot.LagBytes, WALStatus: slot.WALStatus, Stream: n.stream}
	if slot.Exists {
		r.ConfirmedFlush = slot.ConfirmedFlush.String()
	}
	if rec, err := checkpoint.NewStore(pool, n.table.Schema, n.slot).Load(ctx); err == nil && rec.Exists {
		r.Record = &rec
	}
	c.readStream(ctx, n, &r)
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	r.print(os.Stdout)
	return nil
}

// readStream fills in the stream's side; NATS being down is reported, not fatal.
func (c *statusCmd) readStream(ctx context.Context, n names, r *statusReport) {
	nc, err := nats.Connect(c.NATSURL, append(natsAuth(c.natsFlags), nats.Name("outbox-relay status"), nats.Timeout(5*time.Second))...)
	if err != nil {
		r.StreamError = err.Error()
		return
	}
	defer nc.Close()
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
		return
	}
	r.StreamMessages = stream.CachedInfo().State.Msgs
	if r.LastEvent, err = sink.LastEvent(sctx, stream, n.subject.Filter(), n.deadLetter); err != nil {
		r.StreamError = err.Error()
	}
}

func (r statusReport) print(w io.Writer) {
	p := func(k, format string, args ...any) { fmt.Fprintf(w, "%-18s %s\n", k, fmt.Sprintf(format, args...)) }
	if !r.Exists {
		p("slot", "%s (does not exist yet: `outbox-relay run` creates it)", r.Slot)
	} else {
		p("slot", "%s", r.Slot)
		if r.Active {
			p("active", "yes, pid %d", r.ActivePID)
		} else {
			p("active", "no (no relay is streaming)")
		}
		p("confirmed_flush", "%s", r.ConfirmedFlush)
		p("lag", "%s (%d bytes)", humanBytes(r.LagBytes), r.LagBytes)
		p("wal_status", "%s", r.WALStatus)
	}
	if r.Record != nil {
		p("record", "created at %s, confirm limit %s, initial rows published: %v", r.Record.CreatedLSN, r.Record.Limit, r.Record.Bootstrapped)
	}
	if r.StreamError != "" {
		p("stream", "%s: %s", r.Stream, r.StreamError)
		return
	}
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

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
