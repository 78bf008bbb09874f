package jetstream

import (
	"context"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
)

// WaitConnected waits until nc is connected or ctx ends, logging the
// wait. It is the relay's start: a connection nats.go gave up on, or
// whose last attempt failed for a reason waiting cannot fix (the
// credentials, TLS: see ConnectConfigError), ends the wait with a
// contract.FatalError that says how to fix it.
func WaitConnected(ctx context.Context, nc *nats.Conn, log zerolog.Logger) error {
	if nc.IsConnected() {
		return nil
	}
	if err := connectFailed(ctx, nc); err != nil {
		return err
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
		if err := connectFailed(ctx, nc); err != nil {
			return err
		}
	}
	return nil
}

// connectFailed returns the configuration error that keeps nc from
// connecting, if its last attempt failed with one or nats.go closed it.
func connectFailed(ctx context.Context, nc *nats.Conn) error {
	last := nc.LastError()
	if !nc.IsClosed() && !ConnectConfigError(last) {
		return nil
	}
	if last == nil {
		last = nats.ErrConnectionClosed
	}
	return &contract.FatalError{Err: ExplainNATSConnect(ctx, last, strings.Join(nc.Opts.Servers, ","))}
}

var natsUserinfo = regexp.MustCompile(`(://)[^@/\s,]*@`)

// RedactNATS hides user:password in NATS URLs.
func RedactNATS(s string) string { return natsUserinfo.ReplaceAllString(s, "${1}REDACTED@") }
