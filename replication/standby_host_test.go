package replication

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestCheckOneHost: reading from a standby, --pg-url must name one server;
// sslmode=prefer's fallback (the same host without TLS) is still one.
func TestCheckOneHost(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"postgres://relay@s1:5432/app", true},
		{"postgres://relay@s1:5432/app?sslmode=prefer", true},
		{"host=s1 port=5432 dbname=app", true},
		{"postgres://relay@s1:5432,s2:5432/app", false},
		{"host=s1,s2 dbname=app sslmode=prefer", false},
		{"postgres://relay@s1:5432,s1:5433/app", false},
	} {
		c, err := pgconn.ParseConfig(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		err = CheckOneHost(c)
		if (err == nil) != tc.ok {
			t.Errorf("%s: CheckOneHost = %v, want ok %v", tc.url, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "exactly one standby") {
			t.Errorf("%s: %v does not say --pg-url must name exactly one standby", tc.url, err)
		}
	}
}
