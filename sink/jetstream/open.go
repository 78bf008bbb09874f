package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Stream is the stream a relay publishes to, set up and opened: it makes
// the relay's Publisher and its Reader.
type Stream struct {
	nc     *nats.Conn
	js     natsjs.JetStream
	stream natsjs.Stream
	spec   StreamSpec
}

// Open provisions the stream (creates it, or checks one that operators
// made: see EnsureStream), waiting while NATS or JetStream is unavailable;
// a configuration error is returned at once: one of the connection (see
// WaitConnected), or an error wrapping ErrStreamConfig (a stream that
// cannot hold the relay's events, one that cannot be created as asked,
// JetStream disabled, permissions denied: see setUpError).
func Open(ctx context.Context, nc *nats.Conn, spec StreamSpec, log zerolog.Logger) (*Stream, error) {
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	bo := retry.NewBackoff(200*time.Millisecond, 5*time.Second)
	logs := retry.NewLogLimiter()
	for {
		if err := WaitConnected(ctx, nc, log); err != nil {
			return nil, err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := EnsureStream(sctx, js, spec, log)
		var stream natsjs.Stream
		if err == nil {
			stream, err = js.Stream(sctx, spec.Name)
		}
		if err == nil {
			err = readable(sctx, js, stream)
		} else if b := unavailable(spec.Name, err); b != nil {
			err = b
		}
		cancel()
		if err == nil {
			return &Stream{nc: nc, js: js, stream: stream, spec: spec}, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if err = setUpError(nc, spec, err); errors.Is(err, ErrStreamConfig) {
			return nil, &contract.FatalError{Err: err}
		}
		if logs.Allow() {
			log.Warn().Err(err).Str("stream", spec.Name).Msg("JetStream not available yet; retrying")
		}
		if err := sleep(ctx, bo.Next()); err != nil {
			return nil, err
		}
	}
}

// OpenExisting opens the stream spec names as it is, for the operator
// commands that read it or publish a few events to it: it is never created
// or checked, and an unreachable NATS is an error at once.
func OpenExisting(ctx context.Context, nc *nats.Conn, spec StreamSpec) (*Stream, error) {
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	stream, err := js.Stream(ctx, spec.Name)
	if err != nil {
		return nil, fmt.Errorf("open stream %q: %w", spec.Name, err)
	}
	return &Stream{nc: nc, js: js, stream: stream, spec: spec}, nil
}

// Name returns the stream's name.
func (s *Stream) Name() string { return s.spec.Name }

// DuplicateWindow returns the stream's duplicate window, as of Open.
func (s *Stream) DuplicateWindow() time.Duration { return s.stream.CachedInfo().Config.Duplicates }

// NewPublisher returns a Publisher to the stream: cfg's Stream,
// MaxMessageSize and StartSeq are the stream's (as of Open).
func (s *Stream) NewPublisher(cfg Config, log zerolog.Logger, metrics *Metrics) (*Publisher, error) {
	info := s.stream.CachedInfo()
	cfg.Stream = s.stream
	cfg.MaxMessageSize = int(info.Config.MaxMsgSize)
	cfg.StartSeq = info.State.LastSeq
	return NewPublisher(s.nc, cfg, log, metrics)
}

// Reader returns the stream as the relay whose messages carry stamp's
// source reads it back (every relay's messages count as its own with a
// nil stamp), on the template's filter and the dead-letter subject.
func (s *Stream) Reader(stamp *sink.Stamp) *Reader {
	return NewReader(s.js, s.stream, s.spec.Template.Filter(), s.spec.DeadLetterSubject, stamp)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
