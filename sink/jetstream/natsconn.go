package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// NATSOptions say where NATS is and how to authenticate to it: the CLI's
// --nats-* flags.
type NATSOptions struct {
	URL   string // server URLs, comma-separated
	Creds string // credentials file (JWT and NKey seed)
	NKey  string // NKey seed file
	CA    string // CA certificate file to verify the servers (TLS)
	Cert  string // client certificate file (mutual TLS)
	Key   string // client key file (mutual TLS)
}

// ConnectNATS connects with the options a long-running relay needs:
// reconnect forever with capped, jittered backoff; no reconnect buffer, so
// nothing is published behind the relay's back after a reconnect; pings
// frequent enough to notice a dead connection in seconds.
func ConnectNATS(o NATSOptions, name string, log zerolog.Logger) (*nats.Conn, error) {
	where := RedactNATS(o.URL)
	logs := retry.NewLogLimiter() // used by nats.go's callback goroutine only
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1),
		nats.RetryOnFailedConnect(true),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			d := min(100*time.Millisecond<<min(attempts, 6), 5*time.Second)
			return d/2 + rand.N(d/2+1)
		}),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.FlusherTimeout(10 * time.Second),
		// A large write buffer lets the flusher goroutine send big writes
		// instead of the publishing goroutine flushing every 32 KiB inline.
		nats.WriteBufferSize(1 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("disconnected from NATS; reconnecting")
			}
		}),
		// Every failed attempt, with its cause (refused, DNS, TLS, auth),
		// rate-limited. "No servers available" names no cause: the
		// attempt after it does.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil || errors.Is(err, nats.ErrNoServers) || !logs.Allow() {
				return
			}
			log.Warn().Err(err).Str("nats_url", where).Str("cause", NATSCause(err)).Msg("cannot connect to NATS; retrying")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("server", RedactNATS(nc.ConnectedUrl())).Msg("reconnected to NATS")
		}),
	}
	nc, err := nats.Connect(o.URL, append(opts, o.Auth()...)...)
	if err != nil {
		return nil, ExplainNATSConnect(context.Background(), err, o.URL)
	}
	return nc, nil
}

// ConnectNATSOnce connects for a command that runs once (status, doctor):
// one attempt, and a failure says why.
func ConnectNATSOnce(ctx context.Context, o NATSOptions, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(o.URL, append(o.Auth(), nats.Name(name), nats.Timeout(5*time.Second))...)
	if err != nil {
		return nil, ExplainNATSConnect(ctx, err, o.URL)
	}
	return nc, nil
}

// Auth turns the credential and TLS options into connection options. A
// bad NKey seed file shows up as a connection error.
func (o NATSOptions) Auth() []nats.Option {
	var opts []nats.Option
	if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	if o.NKey != "" {
		if opt, err := nats.NkeyOptionFromSeed(o.NKey); err == nil {
			opts = append(opts, opt)
		} else {
			opts = append(opts, func(*nats.Options) error { return fmt.Errorf("--nats-nkey: %w", err) })
		}
	}
	if o.CA != "" {
		opts = append(opts, nats.RootCAs(o.CA))
	}
	if o.Cert != "" || o.Key != "" {
		opts = append(opts, nats.ClientCert(o.Cert, o.Key))
	}
	return opts
}
