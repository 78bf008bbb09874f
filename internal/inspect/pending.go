package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pending is the outbox table as a polling relay (run --source poll) sees
// it: there is no slot, the rows themselves are the backlog.
type Pending struct {
	// Pending rows have no processed_at yet.
	Pending int64 `json:"pending"`
	// OldestPendingSeconds is the age of the oldest pending row
	// (created_at); absent when none is pending.
	OldestPendingSeconds *float64 `json:"oldest_pending_seconds,omitempty"`
	// WaitingForRetry are pending rows the stream refused, until their
	// retry_after.
	WaitingForRetry int64 `json:"waiting_for_retry"`
}

// readPending fills in the polling side of r; Limits.MaxLagAge bounds the
// age of the oldest pending row. Both counts go through the partial
// indexes on processed_at IS NULL, which in polling mode hold the backlog
// only.
func readPending(ctx context.Context, pool *pgxpool.Pool, o Options, r *Report) error {
	table, maxAge := o.Relay.Table, o.Limits.MaxLagAge
	var s Pending
	err := pool.QueryRow(ctx, `SELECT count(*), extract(epoch FROM now() - min(created_at))::float8,
		count(*) FILTER (WHERE retry_after > now())
		FROM `+table.Quoted()+` WHERE processed_at IS NULL`).Scan(&s.Pending, &s.OldestPendingSeconds, &s.WaitingForRetry)
	if err != nil {
		return fmt.Errorf("read the pending rows of %s: %w", table, err)
	}
	r.Poll = &s
	if age := s.Oldest(); maxAge > 0 && age > maxAge {
		r.Problems = append(r.Problems, fmt.Sprintf("the oldest pending row of %s is %s old (--max-lag-age %s): is a polling relay running?",
			table, age.Round(time.Millisecond), maxAge))
	}
	return nil
}

// Oldest is the age of the oldest pending row; 0 when none is pending.
func (s *Pending) Oldest() time.Duration {
	if s.OldestPendingSeconds == nil {
		return 0
	}
	return time.Duration(*s.OldestPendingSeconds * float64(time.Second))
}

// Line is the pending rows in a few words, as status prints them.
func (s *Pending) Line() string {
	if s.Pending == 0 {
		return "0 rows"
	}
	return fmt.Sprintf("%d rows, oldest %s, %d waiting for a retry", s.Pending, s.Oldest().Round(time.Millisecond), s.WaitingForRetry)
}
