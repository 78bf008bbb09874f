package devenv

import (
	"strings"
	"testing"
)

// TestCheckMajor: $OUTBOX_TEST_PG_MAJOR refuses binaries of another
// major and says which; unset, anything goes.
func TestCheckMajor(t *testing.T) {
	t.Setenv(MajorEnv, "")
	if err := checkMajor(17, "/opt/outbox-pg/17/bin"); err != nil {
		t.Errorf("unset: %v", err)
	}
	t.Setenv(MajorEnv, "15")
	if err := checkMajor(15, "/usr/lib/postgresql/15/bin"); err != nil {
		t.Errorf("15 asserted, 15 run: %v", err)
	}
	err := checkMajor(17, "/opt/outbox-pg/17/bin")
	if err == nil || !strings.Contains(err.Error(), "OUTBOX_TEST_PG_MAJOR=15, but the server binaries in /opt/outbox-pg/17/bin are Postgres 17") {
		t.Errorf("15 asserted, 17 run: %v", err)
	}
	t.Setenv(MajorEnv, "fifteen")
	if err := checkMajor(15, "x"); err == nil {
		t.Error("a major that is not a number was accepted")
	}
}
