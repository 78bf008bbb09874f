package poll

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink"
)

// ClaimsTable is the table, in the outbox table's schema, of the rows
// polling batches are publishing (migration 00007).
const ClaimsTable = "outbox_relay_poll_claims"

// clockMargin is how much earlier than a claim the stream is read: the
// claim's time is Postgres's clock, the stream's NATS's.
const clockMargin = 30 * time.Second

// claimQueries are the SQL of the claims table.
type claimQueries struct {
	insert, overlapping, release, drop string
}

func newClaimQueries(schema string) claimQueries {
	t := pgx.Identifier{schema, ClaimsTable}.Sanitize()
	return claimQueries{
		insert:      `INSERT INTO ` + t + ` (event_ids) VALUES ($1) RETURNING claim_id`,
		overlapping: `SELECT claim_id, event_ids, claimed_at FROM ` + t + ` WHERE event_ids && $1::text[]`,
		// Removes the ids settled ($2) from the claims ($1); drop then
		// deletes the claims left empty.
		release: `UPDATE ` + t + ` SET event_ids = ARRAY(SELECT unnest(event_ids) EXCEPT SELECT unnest($2::text[]))
	WHERE claim_id = ANY($1)`,
		drop: `DELETE FROM ` + t + ` WHERE claim_id = ANY($1) AND cardinality(event_ids) = 0`,
	}
}

// claim records, committed at once, that the batch is about to publish
// rows: if the batch ends without its commit, the next one knows they may
// be in the stream.
func (b *batcher) claim(ctx context.Context, take []*row) (int64, error) {
	ids := make([]string, len(take))
	for i, r := range take {
		ids[i] = r.ev.ID
	}
	var id int64
	if err := b.pool.QueryRow(ctx, b.p.cq.insert, ids).Scan(&id); err != nil {
		return 0, fmt.Errorf("claim %d rows before publishing them: %w", len(ids), err)
	}
	return id, nil
}

// skipStored looks for claims on the rows left by batches that ended
// without their commit, and takes out of take the rows the stream already
// holds: they are settled without being published again. It returns the
// rows still to publish, the rows found, and the claims seen. A claim that
// overlaps rows of aggregates this batch holds cannot belong to a batch
// still running: that batch would hold the aggregates.
func (b *batcher) skipStored(ctx context.Context, tx pgx.Tx, take []*row) (publish, found []*row, stale []int64, err error) {
	if len(take) == 0 {
		return nil, nil, nil, nil
	}
	ids := make([]string, len(take))
	for i, r := range take {
		ids[i] = r.ev.ID
	}
	rows, err := tx.Query(ctx, b.p.cq.overlapping, ids)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read claims: %w", err)
	}
	want := map[string]bool{}
	var since time.Time
	for rows.Next() {
		var id int64
		var claimed []string
		var at time.Time
		if err := rows.Scan(&id, &claimed, &at); err != nil {
			rows.Close()
			return nil, nil, nil, fmt.Errorf("read claims: %w", err)
		}
		stale = append(stale, id)
		for _, c := range claimed {
			want[c] = true
		}
		if since.IsZero() || at.Before(since) {
			since = at
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("read claims: %w", err)
	}
	if len(stale) == 0 {
		return take, nil, nil, nil
	}
	stored, err := b.storedSince(ctx, since.Add(-clockMargin), want)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, r := range take {
		if ev, ok := stored[r.ev.ID]; ok {
			r.found = &ev
			found = append(found, r)
		} else {
			publish = append(publish, r)
		}
	}
	b.p.log.Info().Int("claims", len(stale)).Int("rows", len(take)).Int("stored_already", len(found)).
		Msg("rows claimed by a batch that did not commit: the stream holds some already; publishing only the others")
	return publish, found, stale, nil
}

// storedSince returns which of the ids the stream holds in messages stored
// since the given time, event or dead letter, with the message. A dead
// letter names its row by the id it carries (Outbox-Event-Id), also one
// a Nats-Msg-Id cannot carry.
func (b *batcher) storedSince(ctx context.Context, since time.Time, want map[string]bool) (map[string]sink.StoredEvent, error) {
	got := map[string]sink.StoredEvent{}
	err := b.stored.Scan(ctx, since, func(ev sink.StoredEvent, _ bool) bool {
		id := strings.TrimPrefix(ev.ID, contract.DeadLetterMsgIDPrefix)
		if ev.DeadLetter && ev.RowID != "" {
			id = ev.RowID
		}
		if want[id] {
			got[id] = ev
		}
		return len(got) < len(want)
	})
	if err != nil {
		return nil, fmt.Errorf("read the stream for rows claimed by a batch that did not commit: %w", err)
	}
	return got, nil
}

// recordFound lists in Postgres the dead letters of the rows found in the
// stream: the batch that published them ended without its commit, maybe
// before their records (a record follows its dead letter's PubAck). Each
// is recorded as that batch's relay would have, and its row settled as a
// dead letter; a row the stream holds as an event is settled as one,
// whatever this batch would do with it now. Recording one listed already
// changes nothing.
func (b *batcher) recordFound(ctx context.Context, found []*row) error {
	for _, r := range found {
		if !r.found.DeadLetter {
			r.dead = false // stored as the event it is: settled so
			continue
		}
		if !r.dead {
			r.dead, r.ev.Problem = true, r.found.Reason
		}
		if err := b.record(ctx, &r.ev, r.found.ID, r.ev.Problem); err != nil {
			return err
		}
	}
	return nil
}
