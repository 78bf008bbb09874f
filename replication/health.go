package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SlotHealth is what Postgres tells of a slot beyond SlotInfo, where its
// version knows it.
type SlotHealth struct {
	// Invalidated is why Postgres invalidated the slot ("" when it did
	// not): invalidation_reason on 17+, a conflict with recovery on 16.
	Invalidated string
	// InactiveSince is when the slot stopped being streamed from (17+;
	// zero when active or unknown).
	InactiveSince time.Time
	// FlushLag is pg_stat_replication.flush_lag of the slot's walsender:
	// how long WAL the server wrote recently waited for the relay to
	// confirm it. Postgres clears it once the relay has caught up and
	// nothing new comes; HasFlushLag is false then, and while no relay
	// streams.
	FlushLag    time.Duration
	HasFlushLag bool
}

// ReadSlotHealth reads the slot's health; a missing slot has a zero one.
func ReadSlotHealth(ctx context.Context, db Querier, slot string) (SlotHealth, error) {
	var version int
	if err := db.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return SlotHealth{}, fmt.Errorf("read the server version: %w", err)
	}
	cols := `'', NULL::timestamptz`
	switch {
	case version >= 170000:
		cols = `coalesce(s.invalidation_reason, ''), s.inactive_since`
	case version >= 160000:
		cols = `CASE WHEN s.conflicting THEN 'conflicting with recovery' ELSE '' END, NULL::timestamptz`
	}
	var (
		h     SlotHealth
		since *time.Time
		lag   *float64
	)
	err := db.QueryRow(ctx, `SELECT `+cols+`, (SELECT extract(epoch FROM r.flush_lag)::float8 FROM pg_stat_replication r WHERE r.pid = s.active_pid)
		FROM pg_replication_slots s WHERE s.slot_name = $1`, slot).Scan(&h.Invalidated, &since, &lag)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotHealth{}, nil
	}
	if err != nil {
		return SlotHealth{}, fmt.Errorf("read the health of replication slot %q: %w", slot, err)
	}
	if since != nil {
		h.InactiveSince = *since
	}
	if lag != nil {
		h.FlushLag, h.HasFlushLag = time.Duration(*lag*float64(time.Second)), true
	}
	return h, nil
}
