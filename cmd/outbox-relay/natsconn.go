package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/relay"
)

// connectNATS connects with the options a long-running relay needs:
// reconnect forever with capped, jittered backoff; no reconnect buffer, so
// nothing is published behind the relay's back after a reconnect; pings
// frequent enough to notice a dead connection in seconds.
func connectNATS(f natsFlags, name string, log zerolog.Logger) (*nats.Conn, error) {
	where := relay.RedactNATS(f.NATSURL)
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
			log.Warn().Err(err).Str("nats_url", where).Str("cause", relay.NATSCause(err)).Msg("cannot connect to NATS; retrying")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("server", relay.RedactNATS(nc.ConnectedUrl())).Msg("reconnected to NATS")
		}),
	}
	opts = append(opts, natsAuth(f)...)
	nc, err := nats.Connect(f.NATSURL, opts...)
	if err != nil {
		return nil, relay.ExplainNATSConnect(context.Background(), err, f.NATSURL)
	}
	return nc, nil
}

// connectOnce connects for a command that runs once (status, doctor): one
// attempt, and a failure says why.
func connectOnce(ctx context.Context, f natsFlags, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(f.NATSURL, append(natsAuth(f), nats.Name(name), nats.Timeout(5*time.Second))...)
	if err != nil {
		return nil, relay.ExplainNATSConnect(ctx, err, f.NATSURL)
	}
	return nc, nil
}

// natsAuth turns the credential and TLS flags into connection options.
// A bad NKey seed file shows up as a connection error.
func natsAuth(f natsFlags) []nats.Option {
	var opts []nats.Option
	if f.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(f.NATSCreds))
	}
	if f.NATSNKey != "" {
		if opt, err := nats.NkeyOptionFromSeed(f.NATSNKey); err == nil {
			opts = append(opts, opt)
		} else {
			opts = append(opts, func(*nats.Options) error { return fmt.Errorf("--nats-nkey: %w", err) })
		}
	}
	if f.NATSCA != "" {
		opts = append(opts, nats.RootCAs(f.NATSCA))
	}
	if f.NATSCert != "" || f.NATSKey != "" {
		opts = append(opts, nats.ClientCert(f.NATSCert, f.NATSKey))
	}
	return opts
}
