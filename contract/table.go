package contract

import (
	"fmt"
	"regexp"
	"strings"
)

// Table names the outbox table. Both parts are plain lower-case SQL
// identifiers, so the name means the same thing quoted and unquoted.
type Table struct {
	// Schema is the table's schema, public unless named.
	Schema string
	// Name is the table's name within its schema.
	Name string
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ParseTable parses "schema.table" or "table" (schema public).
func ParseTable(s string) (Table, error) {
	schema, name, found := strings.Cut(s, ".")
	if !found {
		schema, name = "public", s
	}
	if !identRE.MatchString(schema) || !identRE.MatchString(name) {
		return Table{}, fmt.Errorf("table %q: want schema.table made of lower-case letters, digits and underscores (for example %s)", s, DefaultTable)
	}
	return Table{Schema: schema, Name: name}, nil
}

// String returns schema.table.
func (t Table) String() string { return t.Schema + "." + t.Name }

// Quoted returns "schema"."table" for use in SQL text.
func (t Table) Quoted() string { return `"` + t.Schema + `"."` + t.Name + `"` }

// Column names the relay reads from the outbox table. created_at and
// headers are optional; every other one is required.
const (
	// ColumnID is the event id, published as the Nats-Msg-Id.
	ColumnID = "id"
	// ColumnAggregateType is the aggregate type (Outbox-Aggregate-Type).
	ColumnAggregateType = "aggregate_type"
	// ColumnAggregateID is the aggregate id (Outbox-Aggregate-Id).
	ColumnAggregateID = "aggregate_id"
	// ColumnEventType is the event type (Outbox-Event-Type).
	ColumnEventType = "event_type"
	// ColumnPayload is the message body.
	ColumnPayload = "payload"
	// ColumnCreatedAt is the optional creation time (Outbox-Created-At).
	ColumnCreatedAt = "created_at"
	// ColumnHeaders is the optional outbox column of per-event message
	// headers (such as traceparent): a JSON object of header names to
	// string values.
	ColumnHeaders = "headers"
)

// ParseTables parses outbox table names: each value is one name or a
// comma-separated list of them (as --table, given several times, and
// OUTBOX_TABLE deliver them). Order is kept: the first table is where
// the relay keeps its record and its dead letters. A table named twice
// is an error, and so is no table at all.
func ParseTables(values ...string) ([]Table, error) {
	var tables []Table
	seen := map[Table]bool{}
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			t, err := ParseTable(strings.TrimSpace(s))
			if err != nil {
				return nil, err
			}
			if seen[t] {
				return nil, fmt.Errorf("table %s is named twice", t)
			}
			seen[t] = true
			tables = append(tables, t)
		}
	}
	if len(tables) == 0 {
		return nil, fmt.Errorf("no table: name at least one (for example %s)", DefaultTable)
	}
	return tables, nil
}

// JoinTables returns the tables' names, comma-separated: the form
// ParseTables reads.
func JoinTables(tables []Table) string {
	s := make([]string, len(tables))
	for i, t := range tables {
		s[i] = t.String()
	}
	return strings.Join(s, ",")
}
