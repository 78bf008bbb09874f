package relaytest

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// SkipLogEnv names a file that every skipped test appends a line to: its
// name, a tab, the reason. CI sets it and compares the skips of each step
// with the ones that step expects (.ci/run), so a test that skips where it
// was meant to run fails the build instead of passing quietly.
const SkipLogEnv = "OUTBOX_TEST_SKIP_LOG"

// Skip skips the test, saying why, and notes it in $OUTBOX_TEST_SKIP_LOG.
// Every skip of the suite goes through it (TestEverySkipIsLogged).
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if path := os.Getenv(SkipLogEnv); path != "" {
		if err := appendLine(path, t.Name()+"\t"+strings.ReplaceAll(reason, "\n", " ")); err != nil {
			t.Fatalf("note the skip in %s: %v (the test would have skipped: %s)", SkipLogEnv, err, reason)
		}
	}
	t.Skip(reason)
}

// appendLine appends one line in one write: test binaries of several
// packages append to the same file at once.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
