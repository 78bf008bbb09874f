package jetstream

import (
	"context"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

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
