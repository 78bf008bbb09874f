package main

import (
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestPublishingVariables: the stream settings and the message form are
// read from their OUTBOX_* variables, as docs/setup.md lists them, into
// the relay's configuration.
func TestPublishingVariables(t *testing.T) {
	run, err := parseRun(t, map[string]string{
		"OUTBOX_PG_URL":           "postgres://u@h/app",
		"OUTBOX_STREAM_REPLICAS":  "3",
		"OUTBOX_STREAM_STORAGE":   "memory",
		"OUTBOX_STREAM_MAX_AGE":   "168h",
		"OUTBOX_STREAM_MAX_BYTES": "1GiB",
		"OUTBOX_STREAM_MAX_MSGS":  "5000",
		"OUTBOX_STREAM_DISCARD":   "old",
		"OUTBOX_DUPLICATE_WINDOW": "5m",
		"OUTBOX_FORMAT":           "cloudevents",
		"OUTBOX_CE_SOURCE":        "/shop/orders",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := run.config()
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.StreamSettings
	if s.Replicas != 3 || s.Storage != natsjs.MemoryStorage || s.MaxAge != 168*time.Hour || s.MaxBytes != 1<<30 || s.MaxMsgs != 5000 || !s.DiscardOld {
		t.Errorf("stream settings from the variables: %+v", s)
	}
	if cfg.DuplicateWindow != 5*time.Minute {
		t.Errorf("duplicate window %s, want 5m", cfg.DuplicateWindow)
	}
	if !cfg.Format.CloudEvents || cfg.Format.CESource != "/shop/orders" {
		t.Errorf("format from the variables: %+v", cfg.Format)
	}
}
