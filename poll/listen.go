package poll

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// listen holds a connection of its own that LISTENs on channel and signals
// wake on every notification, until ctx ends. It reconnects with backoff
// and signals wake after each (re)connection: notifications sent while it
// was away are lost. Without the trigger (migrate --notify) nothing
// arrives and the poll interval does the work.
func listen(ctx context.Context, cfg *pgx.ConnConfig, channel string, wake chan<- struct{}, log zerolog.Logger) {
	bo := retry.NewBackoff(200*time.Millisecond, 5*time.Second)
	logs := retry.NewLogLimiter()
	for ctx.Err() == nil {
		err := listenOnce(ctx, cfg, channel, wake, bo)
		if ctx.Err() != nil {
			return
		}
		if logs.Allow() {
			log.Warn().Err(err).Str("channel", channel).Msg("LISTEN connection lost; reconnecting (polling goes on meanwhile)")
		}
		t := time.NewTimer(bo.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func listenOnce(ctx context.Context, cfg *pgx.ConnConfig, channel string, wake chan<- struct{}, bo *retry.Backoff) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	bo.Reset()
	signal(wake)
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal(wake)
	}
}

func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
