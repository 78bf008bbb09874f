package relay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// OpenPool connects to Postgres, waiting while it is unreachable; bad
// credentials or a missing database fail at once.
func OpenPool(ctx context.Context, cfg *pgxpool.Config, log zerolog.Logger) (*pgxpool.Pool, error) {
	where := replication.Describe(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", where, err)
	}
	bo := retry.NewBackoff(200*time.Millisecond, 5*time.Second)
	logs := retry.NewLogLimiter()
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = pool.Ping(pctx)
		cancel()
		if err == nil {
			return pool, nil
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "28P01" || pe.Code == "28000" || pe.Code == "3D000") {
			pool.Close()
			return nil, fmt.Errorf("connect to %s: %w", where, err)
		}
		if logs.Allow() {
			log.Warn().Err(err).Str("postgres", where).Msg("Postgres is not reachable yet; retrying")
		}
		if err := sleep(ctx, bo.Next()); err != nil {
			pool.Close()
			return nil, err
		}
	}
}

// EnsureStream provisions the stream, waiting while NATS or JetStream is
// unavailable; a stream that does not fit is a fatal error.
func EnsureStream(ctx context.Context, nc *nats.Conn, spec sink.StreamSpec, log zerolog.Logger) (jetstream.Stream, error) {
	js, err := jetstream.New(nc)
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
		_, err := sink.EnsureStream(sctx, js, spec, log)
		var stream jetstream.Stream
		if err == nil {
			stream, err = js.Stream(sctx, spec.Name)
		}
		cancel()
		if err == nil || errors.Is(err, sink.ErrStreamConfig) {
			return stream, err
		}
		if logs.Allow() {
			log.Warn().Err(err).Str("stream", spec.Name).Msg("JetStream not available yet; retrying")
		}
		if err := sleep(ctx, bo.Next()); err != nil {
			return nil, err
		}
	}
}

// untilAnswered runs read until JetStream answers it: while it fails for
// want of an answer (sink.Unanswered: a node that restarted and is catching
// up answers "JetStream system temporarily unavailable", a stream electing
// its leader answers nothing), it waits and asks again, as EnsureStream
// does, rather than failing the start.
func untilAnswered[T any](ctx context.Context, log zerolog.Logger, stream string, read func(context.Context) (T, error)) (T, error) {
	bo := retry.NewBackoff(200*time.Millisecond, 5*time.Second)
	logs := retry.NewLogLimiter()
	for {
		v, err := read(ctx)
		if err == nil || !sink.Unanswered(err) || ctx.Err() != nil {
			return v, err
		}
		if logs.Allow() {
			log.Warn().Err(err).Str("stream", stream).Msg("JetStream not answering yet; retrying")
		}
		if err := sleep(ctx, bo.Next()); err != nil {
			var zero T
			return zero, err
		}
	}
}

// WaitConnected waits until nc is connected or ctx ends, logging the wait.
func WaitConnected(ctx context.Context, nc *nats.Conn, log zerolog.Logger) error {
	if nc.IsConnected() {
		return nil
	}
	ev := log.Warn().Str("nats_url", RedactNATS(strings.Join(nc.Opts.Servers, ",")))
	if err := nc.LastError(); err != nil {
		ev = ev.Err(err).Str("cause", NATSCause(err))
	}
	ev.Msg("NATS is not reachable yet; waiting (the relay retries forever; each failed attempt is logged with its cause)")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
	return nil
}

var natsUserinfo = regexp.MustCompile(`(://)[^@/\s,]*@`)

// RedactNATS hides user:password in NATS URLs.
func RedactNATS(s string) string { return natsUserinfo.ReplaceAllString(s, "${1}REDACTED@") }

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
