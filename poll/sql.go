package poll

import (
	"fmt"
	"hash/fnv"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Columns the polling relay needs beyond the event's own (see migrations
// 00001 and 00007).
var bookkeeping = []string{"processed_at", "attempts", "seq", "retry_after", "last_error"}

// order is an aggregate's insertion order: seq, which rows inserted before
// the migration that added it lack (they come first, in created_at order).
const order = "e.seq NULLS FIRST, e.created_at, e.id"

// headOrder is order for the alias h: an aggregate's head, its first
// pending row.
const headOrder = "h.seq NULLS FIRST, h.created_at, h.id"

// queries are the SQL of one table.
type queries struct {
	// lockAggregates takes the advisory locks of the aggregates of the
	// oldest ready rows ($1 rows scanned, oldest first by created_at
	// through the partial index of migration 00001; $2 lock class; $3 most
	// aggregates) and returns the aggregates it holds. The lock function
	// is volatile, so Postgres evaluates it only on rows that reach the
	// outer filter, in order, until the LIMIT. A row whose aggregate's
	// head (its first pending row: a probe of the pending index, which
	// Postgres 14+ memoizes per aggregate) waits for a retry is not
	// ready: it must not overtake the head, and counting it would let such
	// rows fill every scan, starving the other aggregates while the loop
	// ran empty batches back to back. The scan then passes over the
	// blocked aggregates' rows: 100,000 of them cost 0.1 to 0.2 s a poll
	// (Postgres 15, 2 loaded cores; 1 ms with none blocked).
	lockAggregates string
	// pendingRows reads, FOR UPDATE, the pending rows of the aggregates
	// held ($1, $2: their type and id), each aggregate's in insertion
	// order through the index of migration 00007, at most $3 per aggregate
	// (a batch's share: the aggregates' first rows are what must not wait).
	// Its last column is the headers column's text, NULL when the table
	// has none (migration 00006 adds it).
	pendingRows string
	// markProcessed sets processed_at on the rows at ctids $1.
	markProcessed string
	// reject counts a failed attempt at the row at ctid $1: $2 the error,
	// $3 the wait before the next try in seconds, $4 whether it is dead
	// now (processed_at set: it went to the dead-letter subject).
	reject string
}

func newQueries(t contract.Table, hasHeaders bool) queries {
	q := t.Quoted()
	headers := "NULL::text"
	if hasHeaders {
		headers = "e.headers::text"
	}
	return queries{
		lockAggregates: fmt.Sprintf(`SELECT agg_type, agg_id FROM (
	SELECT agg_type, agg_id, min(n) AS first FROM (
		SELECT agg_type, agg_id, row_number() OVER () AS n FROM (
			SELECT e.aggregate_type::text AS agg_type, e.aggregate_id::text AS agg_id FROM %[1]s e
			LEFT JOIN LATERAL (
				SELECT h.retry_after FROM %[1]s h
				WHERE h.processed_at IS NULL AND h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id
				ORDER BY %[2]s LIMIT 1
			) head ON true
			WHERE e.processed_at IS NULL AND (e.retry_after IS NULL OR e.retry_after <= now())
				AND NOT coalesce(head.retry_after > now(), false)
			ORDER BY e.created_at LIMIT $1
		) pending
	) numbered
	GROUP BY agg_type, agg_id ORDER BY first OFFSET 0
) heads
WHERE pg_try_advisory_xact_lock($2, hashtext(agg_type || chr(31) || agg_id))
LIMIT $3`, q, headOrder),
		pendingRows: fmt.Sprintf(`SELECT r.* FROM unnest($1::text[], $2::text[]) AS a(agg_type, agg_id)
CROSS JOIN LATERAL (
	SELECT e.ctid::text, e.id::text, e.aggregate_type::text, e.aggregate_id::text, e.event_type::text, e.payload::text,
		e.created_at::text, e.attempts::text, coalesce(e.retry_after > now(), false)::text, e.seq, e.created_at AS created, e.id AS row_id, %[3]s
	FROM %[1]s e
	WHERE e.processed_at IS NULL AND e.aggregate_type = a.agg_type AND e.aggregate_id = a.agg_id
	ORDER BY %[2]s LIMIT $3 FOR UPDATE
) r
ORDER BY r.seq NULLS FIRST, r.created, r.row_id`, q, order, headers),
		markProcessed: fmt.Sprintf(`UPDATE %s SET processed_at = now(), retry_after = NULL WHERE ctid = ANY($1::text[]::tid[])`, q),
		reject: fmt.Sprintf(`UPDATE %s SET attempts = attempts + 1, last_error = $2,
	retry_after = CASE WHEN $4 THEN NULL ELSE now() + make_interval(secs => $3) END,
	processed_at = CASE WHEN $4 THEN now() END
WHERE ctid = $1::tid`, q),
	}
}

// lockClass is the first key of the aggregates' advisory locks: one class
// per table, so that tables do not contend and the relay's other advisory
// locks (one bigint key) never collide with these (two int4 keys).
func lockClass(t contract.Table) int32 {
	h := fnv.New32a()
	h.Write([]byte("outbox-relay poll " + t.Quoted()))
	return int32(h.Sum32())
}
