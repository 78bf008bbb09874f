package core

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/replication"
)

// OpenPool connects to Postgres, waiting while it is unreachable; a
// configuration error (the credentials, the database, TLS: see
// connectConfigError) fails at once, with its fix.
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
		if cerr := connectConfigError(ctx, &cfg.ConnConfig.Config, where, err); cerr != nil {
			pool.Close()
			return nil, cerr
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

// PingPool opens a pool with cfg and checks that the server answers, at
// once: OpenPool for a command that runs once (status, doctor), where an
// unreachable server is the answer, not something to wait for.
func PingPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	where := replication.Describe(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres at %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to Postgres at %s: %w", where, err)
	}
	return pool, nil
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
