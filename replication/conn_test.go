package replication

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	cases := map[string]string{
		"postgres://user:s3cret@db:5432/app":                 "postgres://user:REDACTED@db:5432/app",
		"postgresql://u:p%40ss@h/db?sslmode=require":         "postgresql://u:REDACTED@h/db?sslmode=require",
		"host=db user=u password=s3cret dbname=app":          "host=db user=u password=REDACTED dbname=app",
		"host=db password='a b c' user=u":                    "host=db password=REDACTED user=u",
		"postgres://h/db?user=u&password=s3cret&sslmode=off": "postgres://h/db?user=u&password=REDACTED&sslmode=off",
		"postgres://user@db/app":                             "postgres://user@db/app",
	}
	for in, want := range cases {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseConnString(t *testing.T) {
	regular, repl, err := ParseConnString("postgres://relay:pw@db:5433/app?application_name=mine")
	if err != nil {
		t.Fatal(err)
	}
	if repl.RuntimeParams["replication"] != "database" {
		t.Error("replication connection not in database mode")
	}
	if _, ok := regular.ConnConfig.RuntimeParams["replication"]; ok {
		t.Error("regular connections must not be replication connections")
	}
	for _, c := range []map[string]string{regular.ConnConfig.RuntimeParams, repl.RuntimeParams} {
		if c["TimeZone"] != "UTC" || c["DateStyle"] != "ISO, MDY" || c["bytea_output"] != "hex" {
			t.Errorf("session settings missing: %v", c)
		}
		if c["application_name"] != "mine" {
			t.Errorf("application_name = %q, want the user's", c["application_name"])
		}
	}
	if d := Describe(repl); strings.Contains(d, "pw") || d != "postgres://relay@db:5433/app" {
		t.Errorf("Describe = %q", d)
	}
	if _, _, err := ParseConnString(""); err == nil || !strings.Contains(err.Error(), "OUTBOX_PG_URL") {
		t.Errorf("empty connection string: %v", err)
	}
	if _, _, err := ParseConnString("postgres://u:topsecret@h:notaport/db"); err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Errorf("bad connection string error leaks or is nil: %v", err)
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"outbox_relay", "a", "slot_2"} {
		if err := CheckName("slot", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Upper", "with-dash", "x'; DROP", strings.Repeat("a", 64)} {
		if err := CheckName("slot", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
