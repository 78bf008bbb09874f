package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// jsonbCases are JSON texts whose jsonb form is measured without a
// duplicate key (where the estimate is exact) or refused by Postgres.
var jsonbCases = []string{
	`{}`, `[]`, `{"a":1}`, ` { "a" : [ 1 , 2 ] , "b" : { } } `, `"x"`, `true`, `null`, `false`,
	`0`, `-0`, `-0.0`, `0.000`, `-1.50`, `123456789012345678901234567890`,
	`1e3`, `1E+3`, `1.5e-3`, `-1.5e-1`, `0e10`, `0.0e-5`, `1.23e1`, `12.5e-1`, `-0.001e2`, `100e-2`, `1e-5`,
	`0.00012e3`, `9e100`, `1e131071`, `1e-16383`, `5e-16384`, `1e131072`, `0e-16384`, `123e131070`,
	`1e999999999999`, `1e-999999999999`,
	`"\"\\\/\b\f\n\r\t"`, `"\u0041\u00e9\u20ac\ud83d\ude00"`, `"\u001f\u0001\u007f"`, `"é€😀"`, `"<&>\u2028"`,
	`"\u0000"`, `"a\u0000b"`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud83d\\ude00"`, `"\\u0000"`,
	`{"k\n": ["v", 1.0, {"n": null}], "z": -12.345e2}`,
}

// jsonbSize agrees with Postgres: the same length as payload::jsonb::text,
// and an error exactly where Postgres refuses the text.
func TestJSONBSizeMatchesPostgres(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	for _, text := range jsonbCases {
		size, err := outbox.JSONBSize([]byte(text))
		var pgSize int
		pgErr := env.Pool.QueryRow(ctx, `SELECT octet_length($1::text::jsonb::text)`, text).Scan(&pgSize)
		var e *pgconn.PgError
		if pgErr != nil && !errors.As(pgErr, &e) {
			t.Fatalf("%.60s: %v", text, pgErr)
		}
		switch {
		case (err != nil) != (pgErr != nil):
			t.Errorf("%.60s: we say %v, Postgres says %v", text, err, pgErr)
		case err == nil && size != pgSize:
			t.Errorf("%.60s: size %d, Postgres prints %d bytes", text, size, pgSize)
		}
	}
	// Duplicate keys: jsonb keeps the last, the estimate counts both.
	size, _ := outbox.JSONBSize([]byte(`{"a": 1, "a": 2}`))
	if size < len(`{"a": 2}`) {
		t.Errorf("duplicate keys: %d is below the real size", size)
	}
	// Large documents.
	big := `{"items": [` + strings.TrimSuffix(strings.Repeat(`{"sku": "A-1", "qty": 2, "price": 1.5e1},`, 2000), ",") + `]}`
	size, err := outbox.JSONBSize([]byte(big))
	var pgSize int
	if err2 := env.Pool.QueryRow(ctx, `SELECT octet_length($1::text::jsonb::text)`, big).Scan(&pgSize); err != nil || err2 != nil || size != pgSize {
		t.Errorf("large document: %d (%v), Postgres %d (%v)", size, err, pgSize, err2)
	}
}
