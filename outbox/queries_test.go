package outbox_test

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// namedQuery is one "-- name: X :kind" query of a sqlc file.
type namedQuery struct {
	name, kind, sql string
}

// parseQueries splits a sqlc query file and turns @params into $n, as
// sqlc does.
func parseQueries(t *testing.T, path string) []namedQuery {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header := regexp.MustCompile(`(?m)^-- name: (\w+) :(\w+)$`)
	param := regexp.MustCompile(`@(\w+)`)
	locs := header.FindAllSubmatchIndex(text, -1)
	var qs []namedQuery
	for i, loc := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		body := string(text[loc[1]:end])
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		index := map[string]int{}
		sql := param.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(p string) string {
			if _, ok := index[p]; !ok {
				index[p] = len(index) + 1
			}
			return "$" + strconv.Itoa(index[p])
		})
		qs = append(qs, namedQuery{name: string(text[loc[2]:loc[3]]), kind: string(text[loc[4]:loc[5]]), sql: strings.TrimSpace(sql)})
	}
	return qs
}

// Every query of queries.sql runs against the schema the migrations
// create, with the parameters sqlc would bind.
func TestQueriesFile(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	args := map[string][]any{
		"InsertOutboxEvent":            {"order", "42", "order.created", `{"total": 10}`},
		"InsertOutboxEventWithHeaders": {"order", "43", "order.created", `{}`, `{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`},
		"InsertOutboxEvents":           {[]string{"order", "order"}, []string{"1", "2"}, []string{"order.created", "order.paid"}, []string{`{}`, `{"a": 1}`}},
		"OutboxPendingCount":           nil,
		"EmitOutboxEvent":              {"order", "42", "order.paid", `{"total": 10}`},
	}
	qs := parseQueries(t, "queries.sql")
	if len(qs) != len(args) {
		t.Fatalf("queries.sql has %d queries, the test knows %d", len(qs), len(args))
	}
	for _, q := range qs {
		a, ok := args[q.name]
		if !ok {
			t.Fatalf("no arguments for %s", q.name)
		}
		rows, err := env.Pool.Query(ctx, q.sql, a...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		if (q.kind == "one" && n != 1) || (q.name == "InsertOutboxEvents" && n != 2) {
			t.Fatalf("%s returned %d rows", q.name, n)
		}
	}
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d rows (%v), want 4", n, err)
	}
}
