package checkpoint

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/contract"
)

// DeadLetter is an event listed in the dead-letters table (DeadLettersTable),
// with what its outbox row says of it: one row of `dlq list`.
type DeadLetter struct {
	EventID      string     `json:"event_id"`
	Reason       string     `json:"reason"`
	CommitLSN    string     `json:"commit_lsn,omitempty"`
	DeadLettered time.Time  `json:"dead_lettered_at"`
	Retried      *time.Time `json:"retried_at,omitempty"`
	// AggregateType, AggregateID and EventType are the row's; nil when
	// the row is gone from the outbox table.
	AggregateType *string `json:"aggregate_type,omitempty"`
	AggregateID   *string `json:"aggregate_id,omitempty"`
	EventType     *string `json:"event_type,omitempty"`
}

// ListDeadLetters reads the dead letters of the relay of tables, oldest
// first: those not retried yet, or with all every one. A relay of several
// tables keeps its dead letters in its first table's schema, keyed by
// qualified id (see core.DeadLetterKey).
func ListDeadLetters(ctx context.Context, pool *pgxpool.Pool, tables []contract.Table, all bool) ([]DeadLetter, error) {
	rows, err := pool.Query(ctx, `SELECT d.event_id, d.reason, COALESCE(d.commit_lsn::text, ''), d.dead_lettered_at, d.retried_at,
			e.aggregate_type, e.aggregate_id, e.event_type
		FROM `+pgx.Identifier{tables[0].Schema, DeadLettersTable}.Sanitize()+` d
		LEFT JOIN (`+deadLetterRows(tables)+`) e ON e.key = d.event_id
		WHERE $1 OR d.retried_at IS NULL ORDER BY d.dead_lettered_at`, all)
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		err := r.Scan(&d.EventID, &d.Reason, &d.CommitLSN, &d.DeadLettered, &d.Retried, &d.AggregateType, &d.AggregateID, &d.EventType)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	return list, nil
}

// deadLetterRows is the SQL of the tables' rows by dead-letter key (see
// core.DeadLetterKey): the id, or of several tables the qualified id.
func deadLetterRows(tables []contract.Table) string {
	parts := make([]string, len(tables))
	for i, table := range tables {
		key := "id::text"
		if len(tables) > 1 {
			key = "'" + strings.ReplaceAll(contract.QualifiedID(table.String(), ""), "'", "''") + "' || id::text"
		}
		parts[i] = `SELECT ` + key + ` AS key, aggregate_type::text AS aggregate_type, aggregate_id::text AS aggregate_id, event_type::text AS event_type FROM ` + table.Quoted()
	}
	return strings.Join(parts, " UNION ALL ")
}

// DeadLetterIDsNotRetried returns the event ids (dead-letter keys) of the
// dead letters listed and not retried: what `dlq retry --all` publishes
// again.
func (s *Store) DeadLetterIDsNotRetried(ctx context.Context) ([]string, error) {
	var ids []string
	if err := s.db.QueryRow(ctx, `SELECT coalesce(array_agg(event_id), '{}') FROM `+s.deadLetters+` WHERE retried_at IS NULL`).Scan(&ids); err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	return ids, nil
}

// MarkRetried records that the dead letter with this event id (its
// dead-letter key) was published again: it leaves the dead letters not
// retried.
func (s *Store) MarkRetried(ctx context.Context, eventID string) error {
	if _, err := s.db.Exec(ctx, `UPDATE `+s.deadLetters+` SET retried_at = now() WHERE event_id = $1`, eventID); err != nil {
		return fmt.Errorf("mark %s retried: %w", eventID, err)
	}
	return nil
}
