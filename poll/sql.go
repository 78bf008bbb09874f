package poll

import (
	"fmt"
	"hash/fnv"

	"github.com/outbox-relay/outbox-relay/decode"
)

// Columns the polling relay needs beyond the event's own (see migrations
// 00001 and 00006).
var bookkeeping = []string{"processed_at", "attempts", "seq", "retry_after", "last_error"}

// order is insertion order: seq, which rows inserted before the migration
// that added it lack (they come first, in created_at order).
const order = "seq NULLS FIRST, created_at, id"

// aggregateKey is an aggregate as the queries compare it: text, with NULL
// as the empty string (such a row is a dead letter, but it still has its
// place in its aggregate's order).
const aggregateKey = "coalesce(aggregate_type::text, ''), coalesce(aggregate_id::text, '')"

// queries are the SQL of one table.
type queries struct {
	// lockAggregates takes the advisory locks of the aggregates whose
	// earliest ready rows come first ($1 rows scanned, $2 lock class, $3
	// most aggregates) and returns the aggregates it holds. The lock
	// function is volatile, so Postgres evaluates it only on rows that
	// reach the outer filter, in order, until the LIMIT.
	lockAggregates string
	// pendingRows reads, FOR UPDATE, the pending rows of the aggregates
	// held ($1, $2: their type and id), in order, at most $3.
	pendingRows string
	// markProcessed sets processed_at on the rows at ctids $1.
	markProcessed string
	// reject counts a failed attempt at the row at ctid $1: $2 the error,
	// $3 the wait before the next try in seconds, $4 whether it is dead
	// now (processed_at set: it went to the dead-letter subject).
	reject string
}

func newQueries(t decode.Table) queries {
	q := t.Quoted()
	return queries{
		lockAggregates: fmt.Sprintf(`SELECT agg_type, agg_id FROM (
	SELECT agg_type, agg_id, min(n) AS first FROM (
		SELECT agg_type, agg_id, row_number() OVER () AS n FROM (
			SELECT coalesce(aggregate_type::text, '') AS agg_type, coalesce(aggregate_id::text, '') AS agg_id FROM %[1]s
			WHERE processed_at IS NULL AND (retry_after IS NULL OR retry_after <= now())
			ORDER BY %[2]s LIMIT $1
		) pending
	) numbered
	GROUP BY agg_type, agg_id ORDER BY first OFFSET 0
) heads
WHERE pg_try_advisory_xact_lock($2, hashtext(agg_type || chr(31) || agg_id))
LIMIT $3`, q, order),
		pendingRows: fmt.Sprintf(`SELECT ctid::text, id::text, aggregate_type::text, aggregate_id::text, event_type::text, payload::text,
	created_at::text, attempts::text, coalesce(retry_after > now(), false)::text
FROM %[1]s
WHERE processed_at IS NULL AND (%[2]s) IN (SELECT * FROM unnest($1::text[], $2::text[]))
ORDER BY %[3]s LIMIT $3 FOR UPDATE`, q, aggregateKey, order),
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
func lockClass(t decode.Table) int32 {
	h := fnv.New32a()
	h.Write([]byte("outbox-relay poll " + t.Quoted()))
	return int32(h.Sum32())
}
