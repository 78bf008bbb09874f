package relaytest

import "os"

// FastIngestEnv, set to 1, runs the end-to-end tests with fast-ingest
// publishing: the relays they start create their stream with
// allow_batched (--stream-allow-batched) and publish with --fast-ingest
// auto, as do the streams the tests create themselves (FastIngest).
const FastIngestEnv = "OUTBOX_TEST_FAST_INGEST"

// FastIngest reports whether FastIngestEnv asks for fast-ingest
// publishing: a stream a test creates sets AllowBatchPublish to it.
func FastIngest() bool { return os.Getenv(FastIngestEnv) == "1" }
