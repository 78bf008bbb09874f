package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink"
)

// LeftOut is what a comparison within the destination's horizon
// (Options.WithinHorizon) did not compare: the rows created before the
// oldest event the destination still holds, when its own limits removed
// older messages. Their events are not lacking; they were removed.
type LeftOut struct {
	// Before is the horizon: rows created at or before it were left out.
	Before time.Time `json:"before,omitzero"`
	// OldestID is the oldest event of the relay's the destination holds
	// ("" when it holds none).
	OldestID string `json:"oldest_id,omitempty"`
	// Limits names the limits that removed messages.
	Limits string `json:"limits"`
	// Rows is how many rows were left out, and First the created_at of
	// the oldest of them.
	Rows  int       `json:"rows"`
	First time.Time `json:"first,omitzero"`
}

func (l LeftOut) String() string {
	return fmt.Sprintf("%d rows created at or before %s (the oldest event the stream holds), from %s: the stream's limits (%s) removed their events",
		l.Rows, l.Before.Format(time.RFC3339Nano), l.First.Format(time.RFC3339Nano), l.Limits)
}

// NarrowToHorizon narrows opts to the rows created after the destination's
// horizon and returns what that leaves out; nil, with opts unchanged, when
// the destination removed nothing or opts starts later. Rows created at
// the horizon itself are left out: created_at is usually the time a
// transaction began, and the oldest event held shares it with the events
// of its transaction the limits removed just before it.
func NarrowToHorizon(ctx context.Context, db Querier, r sink.Reader, opts *Options) (*LeftOut, error) {
	h, err := r.Horizon(ctx)
	if err != nil || h == nil {
		return nil, err
	}
	after := h.Before.Add(time.Microsecond) // timestamptz's resolution
	if !opts.Since.IsZero() && !opts.Since.Before(after) {
		return nil, nil
	}
	l := &LeftOut{Before: h.Before, Limits: h.Limits}
	if h.Oldest != nil {
		l.OldestID = h.Oldest.ID
	}
	var first *time.Time
	for _, t := range opts.tables() {
		n, oldest, err := countBefore(ctx, db, t, opts.Since, after)
		if err != nil {
			return nil, err
		}
		l.Rows += n
		if oldest != nil && (first == nil || oldest.Before(*first)) {
			first = oldest
		}
	}
	if first != nil {
		l.First = *first
	}
	opts.Since = after
	return l, nil
}

// countBefore counts table's rows created at or after since (zero: any)
// and before the horizon, and returns the oldest one's created_at.
func countBefore(ctx context.Context, db Querier, table contract.Table, since, horizon time.Time) (int, *time.Time, error) {
	var n int
	var first *time.Time
	q := `SELECT count(*), min(created_at) FROM ` + table.Quoted() + ` WHERE ($1::timestamptz IS NULL OR created_at >= $1) AND created_at < $2`
	rows, err := db.Query(ctx, q, nullTime(since), horizon)
	if err != nil {
		return 0, nil, fmt.Errorf("count the rows of %s before the stream's horizon: %w", table, err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&n, &first); err != nil {
			return 0, nil, fmt.Errorf("count the rows of %s before the stream's horizon: %w", table, err)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("count the rows of %s before the stream's horizon: %w", table, err)
	}
	return n, first, nil
}
