package main

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// TestFastIngestVariables: --fast-ingest, --fast-ingest-linger and
// --stream-allow-batched are read from their OUTBOX_* variables (as
// docs/setup.md lists them) into the relay's configuration, with their
// defaults when unset; a mode other than auto or off, or a linger out of
// range, is refused.
func TestFastIngestVariables(t *testing.T) {
	t.Run("Defaults", func(t *testing.T) {
		run, err := parseRun(t, map[string]string{"OUTBOX_PG_URL": "postgres://u@h/app"})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := run.config()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.FastIngest != jetstream.FastIngestAuto || cfg.FastLinger != time.Millisecond || cfg.StreamSettings.AllowBatched {
			t.Errorf("defaults: fast ingest %q, linger %s, allow batched %v; want auto, 1ms, false", cfg.FastIngest, cfg.FastLinger, cfg.StreamSettings.AllowBatched)
		}
	})
	t.Run("Variables", func(t *testing.T) {
		run, err := parseRun(t, map[string]string{
			"OUTBOX_PG_URL":               "postgres://u@h/app",
			"OUTBOX_FAST_INGEST":          "off",
			"OUTBOX_FAST_INGEST_LINGER":   "5ms",
			"OUTBOX_STREAM_ALLOW_BATCHED": "true",
		})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := run.config()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.FastIngest != jetstream.FastIngestOff || cfg.FastLinger != 5*time.Millisecond || !cfg.StreamSettings.AllowBatched {
			t.Errorf("from the variables: fast ingest %q, linger %s, allow batched %v", cfg.FastIngest, cfg.FastLinger, cfg.StreamSettings.AllowBatched)
		}
		if !cfg.StreamSpec().Config().AllowBatchPublish {
			t.Error("the stream the relay creates does not allow batched publishing")
		}
	})
	t.Run("RefusedMode", func(t *testing.T) {
		if _, err := parseRun(t, map[string]string{"OUTBOX_PG_URL": "postgres://u@h/app", "OUTBOX_FAST_INGEST": "on"}); err == nil {
			t.Error("--fast-ingest on accepted")
		}
	})
	t.Run("RefusedLinger", func(t *testing.T) {
		run, err := parseRun(t, map[string]string{"OUTBOX_PG_URL": "postgres://u@h/app"}, "--fast-ingest-linger", "10s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.config(); err == nil {
			t.Error("--fast-ingest-linger 10s accepted: the server's batch timeout is 10s")
		}
	})
}
