package relaytest

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// WaitFor polls cond until it holds, failing the test after timeout; what
// names the awaited state in the failure ("waiting for <what>").
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PrivateCluster starts a cluster of the test's own (StartCluster), for
// settings or faults the shared one must not get; it is removed when the
// test ends.
func PrivateCluster(t testing.TB, settings map[string]string, initArgs ...string) *devenv.Postgres {
	t.Helper()
	cluster, err := StartCluster(settings, initArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() })
	return cluster
}
