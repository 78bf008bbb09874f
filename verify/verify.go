// Package verify compares what Postgres committed with what the stream
// holds: committed outbox rows missing from the stream, messages whose id
// is not a committed row, ids stored more than once, and events of one
// aggregate stored out of commit order.
//
// The table only ever holds committed rows, so "committed" is simply
// "in the table". Messages are matched to rows by Nats-Msg-Id (a
// dead-letter message counts as its event being delivered). Order is
// checked per aggregate with the commit position each message carries
// (Outbox-Commit-Lsn, Outbox-Txn-Index); dead letters and events published
// from the table (commit LSN 0) have no place in that order.
package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Options selects what to compare.
type Options struct {
	Table decode.Table
	// Subjects are the stream subjects the relay publishes on: the
	// template's filter and the dead-letter subject.
	Subjects []string
	// Since and Until bound created_at of the rows (and Outbox-Created-At of
	// the messages) compared; zero means unbounded.
	Since, Until time.Time
}

// clockMargin is how far before Since the stream is read: more than any
// skew between the Postgres and NATS clocks, and than the time an event
// may wait for the relay.
const clockMargin = time.Hour

// Report is the outcome of a comparison.
type Report struct {
	Rows        int `json:"rows"`         // committed rows compared
	Messages    int `json:"messages"`     // stream messages compared
	DeadLetters int `json:"dead_letters"` // of which dead-letter messages
	// Missing are committed row ids with no message.
	Missing []string `json:"missing"`
	// Extra are message ids that match no committed row (a rolled-back
	// event, or a row deleted since).
	Extra []string `json:"extra"`
	// Duplicates maps ids stored more than once to their count.
	Duplicates map[string]int `json:"duplicates"`
	// OrderViolations are events stored after a later event of their
	// aggregate.
	OrderViolations []Violation `json:"order_violations"`
}

// Violation is one event stored out of order within its aggregate.
type Violation struct {
	Aggregate string `json:"aggregate"`
	EventID   string `json:"event_id"`
	After     string `json:"after"` // the event of the same aggregate stored before it but committed after it
}

func (v Violation) String() string {
	return fmt.Sprintf("aggregate %s: event %s stored after %s, which committed later", v.Aggregate, v.EventID, v.After)
}

// OK reports whether nothing is missing, extra, duplicated or reordered.
func (r Report) OK() bool {
	return len(r.Missing) == 0 && len(r.Extra) == 0 && len(r.Duplicates) == 0 && len(r.OrderViolations) == 0
}

// Querier runs a query: a pool, a connection or a transaction (for example
// one that uses a replication slot's snapshot).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Run compares the table, as db sees it, with the stream.
func Run(ctx context.Context, db Querier, stream jetstream.Stream, opts Options) (Report, error) {
	rows, err := committedIDs(ctx, db, opts)
	if err != nil {
		return Report{}, err
	}
	r := Report{Rows: len(rows), Duplicates: map[string]int{}}
	seen := make(map[string]int, len(rows))
	last := map[string]lastOf{}
	// Messages are chosen by their Outbox-Created-At; the stream is only
	// read from a margin before Since, because its stored times come from
	// another clock (and created_at may be set by the application).
	from := opts.Since
	if !from.IsZero() {
		from = from.Add(-clockMargin)
	}
	err = sink.ForEach(ctx, stream, opts.Subjects, sink.Read{Since: from, HeadersOnly: true}, func(m *jetstream.RawStreamMsg) bool {
		ev, ok := sink.ParseStored(m)
		if ok && inRange(m.Header.Get(sink.HeaderCreatedAt), opts) {
			r.count(ev, m, seen, last)
		}
		return true
	})
	if err != nil {
		return r, err
	}
	for id := range rows {
		if seen[id] == 0 {
			r.Missing = append(r.Missing, id)
		}
	}
	for id := range seen {
		if _, ok := rows[id]; !ok {
			r.Extra = append(r.Extra, id)
		}
	}
	return r, nil
}

// count adds one stored message to the report.
func (r *Report) count(ev sink.StoredEvent, m *jetstream.RawStreamMsg, seen map[string]int, last map[string]lastOf) {
	r.Messages++
	if ev.DeadLetter {
		r.DeadLetters++
	}
	seen[ev.ID]++
	if seen[ev.ID] > 1 {
		r.Duplicates[ev.ID] = seen[ev.ID]
		return
	}
	if ev.Position.CommitLSN == 0 || ev.DeadLetter {
		// Published from the table (not in WAL order), or a dead letter,
		// which consumers of the event subjects never see.
		return
	}
	agg := m.Header.Get(sink.HeaderAggregateType) + "/" + m.Header.Get(sink.HeaderAggregateID)
	if prev, ok := last[agg]; ok && ev.Position.Less(prev.pos) {
		r.OrderViolations = append(r.OrderViolations, Violation{Aggregate: agg, EventID: ev.ID, After: prev.id})
		return
	}
	last[agg] = lastOf{id: ev.ID, pos: ev.Position}
}

type lastOf struct {
	id  string
	pos decode.Position
}

func committedIDs(ctx context.Context, db Querier, opts Options) (map[string]struct{}, error) {
	q := `SELECT id::text FROM ` + opts.Table.Quoted() + ` WHERE ($1::timestamptz IS NULL OR created_at >= $1) AND ($2::timestamptz IS NULL OR created_at < $2)`
	rows, err := db.Query(ctx, q, nullTime(opts.Since), nullTime(opts.Until))
	if err != nil {
		return nil, fmt.Errorf("read committed rows of %s: %w", opts.Table, err)
	}
	ids := map[string]struct{}{}
	var id string
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		ids[id] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read committed rows of %s: %w", opts.Table, err)
	}
	return ids, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func inRange(createdAt string, opts Options) bool {
	if opts.Since.IsZero() && opts.Until.IsZero() {
		return true
	}
	t, err := time.Parse(time.RFC3339Nano, createdAt)
	if err != nil {
		return false
	}
	return (opts.Since.IsZero() || !t.Before(opts.Since)) && (opts.Until.IsZero() || t.Before(opts.Until))
}

// Messages calls fn for every message on subjects stored in the stream up
// to its last sequence at the time of the call, in stream order.
func Messages(ctx context.Context, stream jetstream.Stream, subjects []string, fn func(*jetstream.RawStreamMsg)) error {
	return sink.ForEach(ctx, stream, subjects, sink.Read{}, func(m *jetstream.RawStreamMsg) bool {
		fn(m)
		return true
	})
}
