// Package inspect reads what `outbox-relay status` shows: the slot and its
// lag (for a polling relay, the pending rows instead), the relay's record,
// the dead letters not retried and the stream's last event, and says which
// of it is a problem; and, for `status --watch`, samples of it over time
// (Sample) with their figures as text. Printing it is the CLI's.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Report is what `status` prints, and its --json form.
type Report struct {
	Slot               string             `json:"slot"`
	Exists             bool               `json:"exists"`
	Active             bool               `json:"active"`
	ActivePID          int32              `json:"active_pid,omitempty"`
	ConfirmedFlush     string             `json:"confirmed_flush_lsn,omitempty"`
	LagBytes           int64              `json:"lag_bytes"`
	FlushLagSeconds    *float64           `json:"flush_lag_seconds,omitempty"`
	WALStatus          string             `json:"wal_status,omitempty"`
	InactiveSince      *time.Time         `json:"inactive_since,omitempty"`
	Record             *checkpoint.Record `json:"-"` // as RecordJSON
	DeadLettersPending *int64             `json:"dead_letters_not_retried,omitempty"`
	Stream             string             `json:"stream"`
	StreamMessages     uint64             `json:"stream_messages"`
	StreamLastSeq      uint64             `json:"stream_last_seq"`
	StreamError        string             `json:"stream_error,omitempty"`
	// LastEvent is the newest message of the table (its system, database
	// and table, whatever slot published it) in the stream, which other
	// tables' relays may share.
	LastEvent *sink.StoredEvent `json:"-"` // as EventJSON
	// OtherSlots are the other slots recorded in the records table, with
	// their state: an idle one keeps WAL for nobody.
	OtherSlots []checkpoint.OtherSlot `json:"other_slots,omitempty"`
	// Blocked says what keeps the stream from storing another event, and
	// what frees it (a stream limit, the account's quota, a lost quorum).
	Blocked *jssink.Blocked `json:"blocked,omitempty"`
	// Poll replaces the slot's fields with --source poll.
	Poll *Pending `json:"poll,omitempty"`
	// Problems make status exit 1.
	Problems []string `json:"problems,omitempty"`
}

// Options say what Collect reads and what it counts as a problem.
type Options struct {
	// Relay names the slot, the table, the stream and its subjects.
	Relay relay.Config
	// Poll reads the table's pending rows instead of the slot: the
	// backlog of a polling relay (run --source poll).
	Poll bool
	// Limits are the slot's thresholds; with Poll, MaxLagAge bounds the
	// age of the oldest pending row.
	Limits doctor.SlotLimits
}

// Collect reads Postgres and, when nc is given, the stream; an error means
// Postgres could not be read. NATS being unreachable is said in the
// report's StreamError.
func Collect(ctx context.Context, pool *pgxpool.Pool, nc *nats.Conn, o Options) (Report, error) {
	n := o.Relay
	r := Report{Slot: n.Slot, Stream: n.Stream}
	read := readSlot
	if o.Poll {
		r.Slot = ""
		read = readPending
	}
	if err := read(ctx, pool, o, &r); err != nil {
		return r, err
	}
	var pending int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{n.Table.Schema, checkpoint.DeadLettersTable}.Sanitize()+` WHERE retried_at IS NULL`).Scan(&pending); err == nil {
		r.DeadLettersPending = &pending
	}
	if nc != nil {
		readStream(ctx, nc, n, tableSource(ctx, pool, n), &r)
	}
	return r, nil
}

// tableSource is what the table's messages name as their source: status
// shows the newest of them, not another table's in a shared stream. A
// role that may not read pg_control_system() gets the zero source (every
// relay's messages).
func tableSource(ctx context.Context, pool *pgxpool.Pool, n relay.Config) sink.Source {
	src, _ := relay.TableSource(ctx, pool, n)
	return src
}

// readSlot fills in the slot's side of r.
func readSlot(ctx context.Context, pool *pgxpool.Pool, o Options, r *Report) error {
	n := o.Relay
	slot, err := replication.LookupSlot(ctx, pool, n.Slot)
	if err != nil {
		return err
	}
	health, err := replication.ReadSlotHealth(ctx, pool, n.Slot)
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
	store := checkpoint.NewStore(pool, n.Table.Schema, n.Slot)
	if rec, err := store.Load(ctx); err == nil && rec.Exists {
		r.Record = &rec
	}
	r.Problems = o.Limits.SlotProblems(n.Slot, slot, health, time.Now())
	if others, err := store.OtherSlots(ctx, pool); err == nil {
		r.OtherSlots = others
		r.Problems = append(r.Problems, otherSlotProblems(n, others)...)
	}
	return nil
}

// otherSlotProblems: another slot of the table that no relay streams
// from (a renamed --slot, an earlier deployment) keeps WAL for nobody; one
// that a relay streams from makes a relay on this slot refuse to start.
func otherSlotProblems(n relay.Config, others []checkpoint.OtherSlot) []string {
	var out []string
	for _, o := range others {
		table, serves := o.ServesAny(n.Tables()) // any table of a relay of several
		switch {
		case !serves:
		case o.Idle():
			out = append(out, fmt.Sprintf("slot %q, recorded for %s too, exists and no relay streams from it: it keeps %s of WAL; if no relay will use it again, drop it: %s",
				o.Slot, table, doctor.HumanBytes(o.RetainedBytes), o.DropSQL(n.Table.Schema)))
		case o.Active && o.Slot != n.Slot:
			out = append(out, fmt.Sprintf("slot %q streams %s (pid %d): a relay on slot %q would refuse to start while it does", o.Slot, table, o.ActivePID, n.Slot))
		}
	}
	return out
}

// readStream fills in the stream's side; a missing stream is a problem,
// NATS being unreachable is said in StreamError.
func readStream(ctx context.Context, nc *nats.Conn, n relay.Config, src sink.Source, r *Report) {
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
	stream, err := js.Stream(sctx, n.Stream)
	if err != nil {
		r.StreamError = err.Error()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			r.Problems = append(r.Problems, fmt.Sprintf("stream %q does not exist: the relay creates it at start", n.Stream))
		}
		r.noRoom(jssink.StreamUnreadable(n.Stream, err))
		return
	}
	r.noRoom(jssink.CheckRoom(sctx, js, stream.CachedInfo()))
	state := stream.CachedInfo().State
	r.StreamMessages, r.StreamLastSeq = state.Msgs, state.LastSeq
	ofTable := func(ev sink.StoredEvent) bool { return sink.OfTable(ev, src) }
	if r.LastEvent, err = jssink.LastEventOf(sctx, stream, ofTable, n.Subject.Filter(), n.DeadLetterSubject); err != nil {
		r.StreamError = err.Error()
	}
}

// noRoom records b, when set, as the report's problem.
func (r *Report) noRoom(b *jssink.Blocked) {
	if b == nil {
		return
	}
	r.Blocked = b
	r.Problems = append(r.Problems, fmt.Sprintf("stream %q has no room for the relay's next event (%s): %s", b.Stream, b.Reason, b.What))
}
