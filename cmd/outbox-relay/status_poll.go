package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pollStatus is the outbox table as a polling relay (run --source poll)
// sees it: there is no slot, the rows themselves are the backlog.
type pollStatus struct {
	// Pending rows have no processed_at yet.
	Pending int64 `json:"pending"`
	// OldestPendingSeconds is the age of the oldest pending row
	// (created_at); absent when none is pending.
	OldestPendingSeconds *float64 `json:"oldest_pending_seconds,omitempty"`
	// WaitingForRetry are pending rows the stream refused, until their
	// retry_after.
	WaitingForRetry int64 `json:"waiting_for_retry"`
}

// readPoll fills in the polling side of r; --max-lag-age bounds the age
// of the oldest pending row. Both counts go through the partial indexes
// on processed_at IS NULL, which in polling mode hold the backlog only.
func (c *statusCmd) readPoll(ctx context.Context, pool *pgxpool.Pool, n names, r *statusReport) error {
	var s pollStatus
	err := pool.QueryRow(ctx, `SELECT count(*), extract(epoch FROM now() - min(created_at))::float8,
		count(*) FILTER (WHERE retry_after > now())
		FROM `+n.table.Quoted()+` WHERE processed_at IS NULL`).Scan(&s.Pending, &s.OldestPendingSeconds, &s.WaitingForRetry)
	if err != nil {
		return fmt.Errorf("read the pending rows of %s: %w", n.table, err)
	}
	r.Poll = &s
	if age := s.oldest(); c.MaxLagAge > 0 && age > c.MaxLagAge {
		r.Problems = append(r.Problems, fmt.Sprintf("the oldest pending row of %s is %s old (--max-lag-age %s): is a polling relay running?",
			n.table, age.Round(time.Millisecond), c.MaxLagAge))
	}
	return nil
}

func (s *pollStatus) oldest() time.Duration {
	if s.OldestPendingSeconds == nil {
		return 0
	}
	return time.Duration(*s.OldestPendingSeconds * float64(time.Second))
}

// line is the pending rows in a few words.
func (s *pollStatus) line() string {
	if s.Pending == 0 {
		return "0 rows"
	}
	return fmt.Sprintf("%d rows, oldest %s, %d waiting for a retry", s.Pending, s.oldest().Round(time.Millisecond), s.WaitingForRetry)
}
