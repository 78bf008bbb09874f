package relaytest

import (
	"os"
	"strings"
	"testing"
)

// FastIngestEnv, set to 1, runs the end-to-end tests with fast-ingest
// publishing: the relays they start create their stream with
// allow_batched (--stream-allow-batched) and publish with --fast-ingest
// auto, as do the streams the tests create themselves (FastIngest).
const FastIngestEnv = "OUTBOX_TEST_FAST_INGEST"

// FastIngest reports whether FastIngestEnv asks for fast-ingest
// publishing: a stream a test creates sets AllowBatchPublish to it.
func FastIngest() bool { return os.Getenv(FastIngestEnv) == "1" }

// logFastIngest is what a relay logs at start when it publishes in
// fast-ingest batches.
const logFastIngest = "publishing in fast-ingest batches"

// requireFastIngest fails a case run with FastIngestEnv whose relay did
// not publish in fast-ingest batches: the run would not test them. (With
// fast ingest, JetStream drops a duplicate without saying so: the
// relay's duplicate count stays 0 whatever happened, and only the
// stream's check can tell.)
func requireFastIngest(t testing.TB, relay *Relay) {
	t.Helper()
	if FastIngest() && !strings.Contains(relay.Logs(), logFastIngest) {
		t.Errorf("%s=1 but the relay did not publish in fast-ingest batches", FastIngestEnv)
	}
}
