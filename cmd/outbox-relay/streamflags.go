package main

import (
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// streamFlags are the settings of the stream `run` creates when it is
// missing (--duplicate-window, among the names, is one too). An existing
// stream is adopted as it is: the relay warns about the settings it
// lacks, and refuses one that cannot keep the promise.
type streamFlags struct {
	StreamReplicas int               `name:"stream-replicas" env:"OUTBOX_STREAM_REPLICAS" default:"1" help:"Replicas of a stream the relay creates: 3 in a JetStream cluster for production (each event then survives the loss of a server)."`
	StreamStorage  string            `name:"stream-storage" env:"OUTBOX_STREAM_STORAGE" default:"file" enum:"file,memory" help:"Storage of a stream the relay creates: file, or memory (events are lost when NATS restarts, after the relay confirmed them to Postgres: tests and demos only)."`
	StreamMaxAge   time.Duration     `name:"stream-max-age" env:"OUTBOX_STREAM_MAX_AGE" default:"0" help:"Oldest message a stream the relay creates keeps (e.g. 168h); 0 keeps them until a size or count limit."`
	StreamMaxBytes contract.ByteSize `name:"stream-max-bytes" env:"OUTBOX_STREAM_MAX_BYTES" default:"0" help:"Size limit of a stream the relay creates (e.g. 10GiB, 500MB); 0 is none."`
	StreamMaxMsgs  int64             `name:"stream-max-msgs" env:"OUTBOX_STREAM_MAX_MSGS" default:"0" help:"Message limit of a stream the relay creates; 0 is none."`
	StreamDiscard  string            `name:"stream-discard" env:"OUTBOX_STREAM_DISCARD" default:"new" enum:"new,old" help:"What a stream the relay creates does at --stream-max-bytes or --stream-max-msgs: new refuses new events (the relay keeps them until there is room), old removes the oldest (consumers that fall behind lose events)."`

	// Fast-ingest publishing (run's --fast-ingest) needs it.
	StreamAllowBatched bool `name:"stream-allow-batched" env:"OUTBOX_STREAM_ALLOW_BATCHED" help:"Create the stream with allow_batched (nats-server 2.14+), so that --fast-ingest auto publishes in fast-ingest batches; an existing stream keeps its own setting."`
}

// settings are the flags as the jetstream package takes them.
func (f streamFlags) settings() (jetstream.StreamSettings, error) {
	s := jetstream.StreamSettings{
		Replicas: f.StreamReplicas, MaxAge: f.StreamMaxAge, MaxBytes: int64(f.StreamMaxBytes), MaxMsgs: f.StreamMaxMsgs,
		DiscardOld: f.StreamDiscard == "old", AllowBatched: f.StreamAllowBatched,
	}
	if f.StreamStorage == "memory" {
		s.Storage = natsjs.MemoryStorage
	}
	switch {
	case f.StreamReplicas < 1 || f.StreamReplicas > 5:
		return s, fmt.Errorf("--stream-replicas %d: JetStream keeps 1 to 5 replicas", f.StreamReplicas)
	case f.StreamMaxAge < 0:
		return s, fmt.Errorf("--stream-max-age %s: must not be negative", f.StreamMaxAge)
	case f.StreamMaxAge > 0 && f.StreamMaxAge < time.Second:
		return s, fmt.Errorf("--stream-max-age %s: use at least 1s (0 for no limit)", f.StreamMaxAge)
	case f.StreamMaxBytes < 0:
		return s, fmt.Errorf("--stream-max-bytes %d: must not be negative", int64(f.StreamMaxBytes))
	case f.StreamMaxMsgs < 0:
		return s, fmt.Errorf("--stream-max-msgs %d: must not be negative", f.StreamMaxMsgs)
	}
	return s, nil
}
