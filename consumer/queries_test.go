package consumer

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Every query of queries.sql runs against the migrated tables, with the
// parameters sqlc would bind (@name as $n).
func TestQueriesFile(t *testing.T) {
	f := newFixture(t, drivers[0]) // the queries run on the pool; the driver is not used
	ctx := context.Background()
	text, err := os.ReadFile("queries.sql")
	if err != nil {
		t.Fatal(err)
	}
	f.env.Exec(`INSERT INTO failed_events (consumer, event_id, stream, stream_seq, subject, deliveries, error, headers, payload)
		VALUES ('billing', 'e1', 'OUTBOX', 1, 'outbox.x', 5, 'boom', '{}', '')`)
	args := map[string][]any{
		"ClaimEvent":        {"billing", "e1"},
		"ListFailedEvents":  {"billing", 10},
		"ForgetFailedEvent": {"billing", "e1"},
	}
	want := map[string]int{"ClaimEvent": 1, "ListFailedEvents": 1, "ForgetFailedEvent": 0}
	header := regexp.MustCompile(`(?m)^-- name: (\w+) :\w+$`)
	param := regexp.MustCompile(`@(\w+)`)
	locs := header.FindAllSubmatchIndex(text, -1)
	if len(locs) != len(args) {
		t.Fatalf("queries.sql has %d queries, the test knows %d", len(locs), len(args))
	}
	for i, loc := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		name := string(text[loc[2]:loc[3]])
		index := map[string]int{}
		sql := param.ReplaceAllStringFunc(string(text[loc[1]:end]), func(p string) string {
			if _, ok := index[p]; !ok {
				index[p] = len(index) + 1
			}
			return "$" + strconv.Itoa(index[p])
		})
		rows, err := f.env.Pool.Query(ctx, strings.TrimSpace(sql), args[name]...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil || n != want[name] {
			t.Fatalf("%s: %d rows (%v), want %d", name, n, err, want[name])
		}
	}
	// The claim, a second time: no row.
	var claimed bool
	if err := f.env.Pool.QueryRow(ctx, `INSERT INTO processed_events (consumer, event_id) VALUES ('billing', 'e1') ON CONFLICT (consumer, event_id) DO NOTHING RETURNING true`).Scan(&claimed); err == nil {
		t.Fatal("a second claim returned a row")
	}
	if n := f.count(`SELECT count(*) FROM failed_events`); n != 0 {
		t.Fatalf("%d failed events after ForgetFailedEvent", n)
	}
}
