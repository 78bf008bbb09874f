// Package verify compares what Postgres committed with what the stream
// holds: committed outbox rows missing from the stream, messages whose id
// is not a committed row, ids stored more than once, and events of one
// aggregate stored out of commit order.
//
// The table only ever holds committed rows, so "committed" is simply
// "in the table". Messages are matched to rows by Nats-Msg-Id (a
// dead-letter message counts as its event being delivered) and, for a
// relay of several tables, by the table the message names (see Keys). Order is
// checked per aggregate with the commit position each message carries
// (Outbox-Commit-Lsn, Outbox-Txn-Index); dead letters and events published
// from the table (commit LSN 0) have no place in that order.
package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/progress"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Options selects what to compare.
type Options struct {
	// Table is the outbox table compared, the first of several when
	// MoreTables names others.
	Table contract.Table
	// MoreTables are the further tables of a relay of several (see
	// Keys).
	MoreTables []contract.Table
	// Since and Until bound created_at of the rows (and Outbox-Created-At of
	// the messages) compared; zero means unbounded.
	Since, Until time.Time
	// Source, when set, names the table's events: messages of another
	// table, database or cluster sharing the stream (see
	// sink.Source.SameTable) are left out, whatever slot published them.
	// Messages without a source, published by relays older than the
	// Outbox-Source-* headers, count as the table's. When unset, the
	// reader's owner is used; with neither, every relay message counts.
	Source sink.Source
	// WithinHorizon compares only rows created at or after the oldest
	// event the destination still holds when its own limits removed
	// older messages (sink.Reader.Horizon): those events are not lacking.
	// Report.LeftOut says what was left out.
	WithinHorizon bool
	// Progress, when set, is shown how far the stream was read (a log
	// line every 10s, or a bar): the messages read, of about as many as
	// the rows compared, the rate and the time left.
	Progress progress.Reporter
}

// Keys: rows and messages are compared by key. For one table the key is
// the row's id, as the stream knows it. For several it is the qualified
// id, schema.table/id (contract.QualifiedID), since two tables may hold
// the same id; the report lists keys. A message counts for the table its
// Outbox-Table header names, or, without one (a relay older than the
// header), for the first table; messages naming another table are left
// out. A message's id counts in either form, plain or qualified, so that
// what a relay stored before a table was added to it, or removed, is
// still matched to its row (and stored again in the other form, a
// duplicate).

// tables returns every table compared, Table first.
func (o Options) tables() []contract.Table {
	return append([]contract.Table{o.Table}, o.MoreTables...)
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
	// Unparsed are messages on the relay's subjects whose headers verify
	// cannot read (not the relay's, or damaged): nothing can be said about
	// the events they carry.
	Unparsed []Unparsed `json:"unparsed"`
	// LeftOut, with Options.WithinHorizon, is what was not compared
	// because the destination's limits removed it (nil: nothing).
	LeftOut *LeftOut `json:"left_out,omitempty"`
}

// Unparsed is a stored message verify cannot read.
type Unparsed struct {
	Seq     uint64 `json:"seq"`
	Subject string `json:"subject"`
	Reason  string `json:"reason"`
}

func (u Unparsed) String() string {
	return fmt.Sprintf("message %d on %s: %s", u.Seq, u.Subject, u.Reason)
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

// OK reports whether nothing is missing, extra, duplicated, reordered or
// unreadable.
func (r Report) OK() bool {
	return len(r.Missing) == 0 && len(r.Extra) == 0 && len(r.Duplicates) == 0 && len(r.OrderViolations) == 0 &&
		len(r.Unparsed) == 0
}

// Querier runs a query: a pool, a connection or a transaction (for example
// one that uses a replication slot's snapshot).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Run compares the table, as db sees it, with what r holds.
func Run(ctx context.Context, db Querier, r sink.Reader, opts Options) (Report, error) {
	var left *LeftOut
	if opts.WithinHorizon {
		var err error
		if left, err = NarrowToHorizon(ctx, db, r, &opts); err != nil {
			return Report{}, err
		}
	}
	rows, err := committedIDs(ctx, db, opts)
	if err != nil {
		return Report{}, err
	}
	if opts.Source.IsZero() {
		opts.Source = r.Owner()
	}
	c := newComparison(rows, opts)
	// Messages are chosen by their Outbox-Created-At; the stream is only
	// read from a margin before Since, because its stored times come from
	// another clock (and created_at may be set by the application).
	from := opts.Since
	if !from.IsZero() {
		from = from.Add(-clockMargin)
	}
	var prog *progress.Meter
	if opts.Progress != nil {
		prog = progress.NewTo("verifying: reading the stream (total: the rows compared)", len(rows), opts.Progress).Counting("messages")
		defer prog.Every(ctx, 0)()
	}
	err = r.Scan(ctx, from, func(ev sink.StoredEvent, ok bool) bool {
		if prog != nil {
			prog.Add()
		}
		c.add(ev, ok)
		return true
	})
	if err != nil {
		return c.r, err
	}
	rep := c.report()
	rep.LeftOut = left
	return rep, nil
}

// comparison is the pure part of Run: committed row ids in, stored
// messages added one by one in stream order, a Report out. It holds one
// entry per id, never the messages.
type comparison struct {
	opts Options
	rows map[string]struct{}
	r    Report
	seen map[string]int
	last map[string]lastOf
	// tables are the names of the tables compared; first is Table's.
	tables map[string]bool
	first  string
}

func newComparison(rows map[string]struct{}, opts Options) *comparison {
	c := &comparison{
		opts:   opts,
		rows:   rows,
		r:      Report{Rows: len(rows), Duplicates: map[string]int{}},
		seen:   make(map[string]int, len(rows)),
		last:   map[string]lastOf{},
		tables: map[string]bool{},
		first:  opts.Table.String(),
	}
	for _, t := range opts.tables() {
		c.tables[t.String()] = true
	}
	return c
}

// rowKey is the key of the row of table with id.
func (c *comparison) rowKey(table, id string) string {
	if len(c.opts.MoreTables) == 0 {
		return id
	}
	return contract.QualifiedID(table, id)
}

// key returns the key a stored message counts under (see Keys); ok is
// false for a message of a table not compared.
func (c *comparison) key(ev sink.StoredEvent) (string, bool) {
	table := ev.Table
	if table == "" {
		table = c.first
	}
	if !c.tables[table] {
		return "", false
	}
	id := ev.ID
	if plain, ok := strings.CutPrefix(id, contract.QualifiedID(table, "")); ok {
		// Qualified by a relay of several tables, unless a row's own id
		// reads so.
		if _, own := c.rows[c.rowKey(table, id)]; !own {
			id = plain
		}
	}
	return c.rowKey(table, id), true
}

// add takes the next stored message, in stream order; ok is false when
// its relay headers cannot be read.
func (c *comparison) add(ev sink.StoredEvent, ok bool) {
	if ok && !sink.OfTable(ev, c.opts.Source) {
		return // another table's message, in a shared stream
	}
	if ok && ev.Copy() {
		return // a copy published by replay, for consumers that rebuild: not a delivery
	}
	if ev.ID != "" {
		key, ours := c.key(ev)
		if !ours {
			return // another table's message
		}
		ev.ID = key
	}
	switch in, known := inRange(ev.CreatedAt, c.opts); {
	case known && !in:
		return // outside the compared range
	case !known && !c.storedInRange(ev):
		return // unreadable, and stored well outside the range
	case !ok:
		c.unparsed(ev, "no readable relay headers ("+contract.HeaderCommitLSN+", "+contract.HeaderTxnIndex+")")
	case ev.ID == "":
		c.unparsed(ev, "no "+contract.HeaderMsgID+" header")
	case !known:
		c.unparsed(ev, "the "+contract.HeaderCreatedAt+" header is missing or not RFC 3339, so it cannot be placed in the range compared")
	default:
		c.count(ev)
	}
}

func (c *comparison) unparsed(ev sink.StoredEvent, reason string) {
	c.r.Messages++
	c.r.Unparsed = append(c.r.Unparsed, Unparsed{Seq: ev.Seq, Subject: ev.Subject, Reason: reason})
}

// storedInRange reports whether a message whose created_at is unknown was
// stored within the compared range, widened by the clock margin.
func (c *comparison) storedInRange(ev sink.StoredEvent) bool {
	if ev.Time.IsZero() {
		return true
	}
	return (c.opts.Since.IsZero() || !ev.Time.Before(c.opts.Since.Add(-clockMargin))) &&
		(c.opts.Until.IsZero() || ev.Time.Before(c.opts.Until.Add(clockMargin)))
}

// count adds one stored relay message to the report.
func (c *comparison) count(ev sink.StoredEvent) {
	r := &c.r
	r.Messages++
	if ev.DeadLetter {
		r.DeadLetters++
	}
	c.seen[ev.ID]++
	if c.seen[ev.ID] > 1 {
		r.Duplicates[ev.ID] = c.seen[ev.ID]
		return
	}
	if ev.Position.CommitLSN == 0 || ev.DeadLetter {
		// Published from the table (not in WAL order), or a dead letter,
		// which consumers of the event subjects never see.
		return
	}
	agg := ev.AggregateType + "/" + ev.AggregateID
	if prev, ok := c.last[agg]; ok && ev.Position.Less(prev.pos) {
		r.OrderViolations = append(r.OrderViolations, Violation{Aggregate: agg, EventID: ev.ID, After: prev.id})
		return
	}
	c.last[agg] = lastOf{id: ev.ID, pos: ev.Position}
}

// report returns the outcome: the messages added so far against the rows.
func (c *comparison) report() Report {
	r := c.r
	r.Missing, r.Extra = nil, nil
	for id := range c.rows {
		if c.seen[id] == 0 {
			r.Missing = append(r.Missing, id)
		}
	}
	for id := range c.seen {
		if _, ok := c.rows[id]; !ok {
			r.Extra = append(r.Extra, id)
		}
	}
	slices.Sort(r.Missing)
	slices.Sort(r.Extra)
	return r
}

type lastOf struct {
	id  string
	pos decode.Position
}

// committedIDs returns the keys of the committed rows of every table
// compared (see Keys).
func committedIDs(ctx context.Context, db Querier, opts Options) (map[string]struct{}, error) {
	ids := map[string]struct{}{}
	for _, t := range opts.tables() {
		prefix := ""
		if len(opts.MoreTables) > 0 {
			prefix = contract.QualifiedID(t.String(), "")
		}
		if err := readIDs(ctx, db, t, opts, func(id string) { ids[prefix+id] = struct{}{} }); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// readIDs calls add with the id of every row of table in the range.
func readIDs(ctx context.Context, db Querier, table contract.Table, opts Options, add func(string)) error {
	q := `SELECT id::text FROM ` + table.Quoted() + ` WHERE ($1::timestamptz IS NULL OR created_at >= $1) AND ($2::timestamptz IS NULL OR created_at < $2)`
	rows, err := db.Query(ctx, q, nullTime(opts.Since), nullTime(opts.Until))
	if err != nil {
		return fmt.Errorf("read committed rows of %s: %w", table, err)
	}
	var id string
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		add(id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read committed rows of %s: %w", table, err)
	}
	return nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// inRange reports whether createdAt is within the compared range; known is
// false when a range is set and createdAt cannot be read.
func inRange(createdAt string, opts Options) (in, known bool) {
	if opts.Since.IsZero() && opts.Until.IsZero() {
		return true, true
	}
	t, err := time.Parse(time.RFC3339Nano, createdAt)
	if err != nil {
		return false, false
	}
	return (opts.Since.IsZero() || !t.Before(opts.Since)) && (opts.Until.IsZero() || t.Before(opts.Until)), true
}

// MarshalJSON writes the report as `verify --json` prints it
// (docs/json.md): the lists empty rather than null when nothing is in
// them.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // without this method
	p := plain(r)
	if p.Missing == nil {
		p.Missing = []string{}
	}
	if p.Extra == nil {
		p.Extra = []string{}
	}
	if p.Duplicates == nil {
		p.Duplicates = map[string]int{}
	}
	if p.OrderViolations == nil {
		p.OrderViolations = []Violation{}
	}
	if p.Unparsed == nil {
		p.Unparsed = []Unparsed{}
	}
	return json.Marshal(p)
}
