package main

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/devenv"
)

// natsdCmd runs an embedded NATS server with JetStream in its own process,
// so `bench` can measure the broker's CPU apart from the relay's.
type natsdCmd struct {
	Port       int    `name:"port" required:"" help:"Client port on 127.0.0.1."`
	Store      string `name:"store" required:"" help:"JetStream store directory."`
	SyncAlways bool   `name:"sync-always" help:"fsync before every acknowledgement."`
}

func (c *natsdCmd) Run(ctx context.Context, log zerolog.Logger) error {
	n, err := devenv.StartNATS(devenv.NATSOptions{Port: c.Port, StoreDir: c.Store, SyncAlways: c.SyncAlways})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	n.Stop()
	return nil
}
