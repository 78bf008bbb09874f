package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/poll"
	"github.com/outbox-relay/outbox-relay/relay"
)

const (
	sourceWAL  = "wal"
	sourcePoll = "poll"
)

// pollOneTable is what to do instead of polling several tables at once.
const pollOneTable = "run one polling relay per table, each with its own --slot (its claims and dead letters are keyed by it), or read them all from the WAL (--source wal)"

// errPrimaryWithPoll refuses --primary-url with --source poll, in run and
// doctor alike.
var errPrimaryWithPoll = errors.New("--primary-url is for --source wal (reading from a standby's slot); the polling relay writes to the table it reads: point --pg-url at the primary")

// pollFlags choose where run reads events and tune the polling relay.
type pollFlags struct {
	Source          string        `name:"source" env:"OUTBOX_SOURCE" default:"wal" enum:"wal,poll" help:"Where events come from: wal (the logical replication slot) or poll (the table, in batches, for databases without logical replication; see docs/polling.md)."`
	PollBatch       int           `name:"poll-batch" env:"OUTBOX_POLL_BATCH" default:"${poll_batch}" help:"With --source poll: most rows one batch (one transaction) publishes."`
	PollInterval    time.Duration `name:"poll-interval" env:"OUTBOX_POLL_INTERVAL" default:"${poll_interval}" help:"With --source poll: longest wait between polls; a NOTIFY (migrate --notify) wakes the relay sooner."`
	PollMaxAttempts int           `name:"poll-max-attempts" env:"OUTBOX_POLL_MAX_ATTEMPTS" default:"${poll_max_attempts}" help:"With --source poll: tries of a row the stream cannot take before it goes to the dead-letter subject."`
	PollBackoff     time.Duration `name:"poll-backoff" env:"OUTBOX_POLL_BACKOFF" default:"${poll_backoff}" help:"With --source poll: wait after a row's first rejection, doubled after each next one."`
	PollMaxBackoff  time.Duration `name:"poll-max-backoff" env:"OUTBOX_POLL_MAX_BACKOFF" default:"${poll_max_backoff}" help:"With --source poll: longest wait between a row's tries."`
}

func (f pollFlags) validate() error {
	switch {
	case f.PollBatch < 1 || f.PollBatch > 100_000:
		return fmt.Errorf("--poll-batch %d: use 1 to 100000", f.PollBatch)
	case f.PollInterval < 10*time.Millisecond:
		return fmt.Errorf("--poll-interval %s: use at least 10ms", f.PollInterval)
	case f.PollMaxAttempts < 1:
		return fmt.Errorf("--poll-max-attempts %d: use 1 or more", f.PollMaxAttempts)
	case f.PollBackoff < 10*time.Millisecond || f.PollMaxBackoff < f.PollBackoff:
		return fmt.Errorf("--poll-backoff %s, --poll-max-backoff %s: use at least 10ms, the maximum not below the first", f.PollBackoff, f.PollMaxBackoff)
	}
	return nil
}

// serve runs the polling relay with cfg's names and publishing settings.
func (f pollFlags) serve(ctx context.Context, cfg relay.Config, natsOpts jetstream.NATSOptions, metricsAddr string, log zerolog.Logger) error {
	if err := f.validate(); err != nil {
		return err
	}
	pc := poll.Config{Publishing: cfg.Publishing, PGURL: cfg.PGURL, Table: cfg.Table, Slot: cfg.Slot, Batch: f.PollBatch, Interval: f.PollInterval, MaxAttempts: f.PollMaxAttempts,
		Backoff: f.PollBackoff, MaxBackoff: f.PollMaxBackoff}
	return serve(ctx, natsOpts, metricsAddr, log, func(deps core.Deps) (runner, error) { return poll.New(pc, deps) })
}
