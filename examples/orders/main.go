// Command orders is the example order service: POST /orders writes an
// order and its order.created event in one transaction, and the billing
// consumer turns each event into one invoice. Run it next to
// outbox-relay (see docker-compose.yml and docs/example.md).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"
)

type cli struct {
	PGURL     string        `name:"pg-url" env:"ORDERS_PG_URL" help:"Postgres connection string of the service's database (the outbox table's)."`
	PGURLFile string        `name:"pg-url-file" env:"ORDERS_PG_URL_FILE" help:"File holding the connection string (a mounted secret), instead of --pg-url."`
	NATSURL   string        `name:"nats-url" env:"ORDERS_NATS_URL" default:"nats://127.0.0.1:4222" help:"NATS server URLs, comma-separated."`
	Stream    string        `name:"stream" env:"ORDERS_STREAM" default:"OUTBOX" help:"The relay's stream."`
	Filter    string        `name:"filter" env:"ORDERS_FILTER" default:"outbox.order.>" help:"Subjects of the order events in the stream."`
	Consumer  string        `name:"consumer" env:"ORDERS_CONSUMER" default:"billing" help:"Durable consumer name (also the name in processed_events)."`
	HTTPAddr  string        `name:"http-addr" env:"ORDERS_HTTP_ADDR" default:"127.0.0.1:8080" help:"Address for POST /orders and GET /healthz."`
	DemoEvery time.Duration `name:"demo-every" env:"ORDERS_DEMO_EVERY" default:"0s" help:"Create a demo order this often (0: only on POST /orders)."`
	LogFormat string        `name:"log-format" env:"ORDERS_LOG_FORMAT" default:"console" enum:"console,json" help:"Log format: console or json."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Name("orders"), kong.Description("The example order service: transactional outbox writes and an idempotent consumer."))
	log := zerolog.New(os.Stderr).With().Timestamp().Logger()
	if c.LogFormat == "console" {
		log = log.Output(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error().Err(err).Msg("stopped")
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// pgURL is --pg-url, or the contents of --pg-url-file.
func (c cli) pgURL() (string, error) {
	switch {
	case c.PGURLFile != "" && c.PGURL != "":
		return "", fmt.Errorf("--pg-url and --pg-url-file are both set: keep one")
	case c.PGURLFile != "":
		b, err := os.ReadFile(c.PGURLFile)
		if err != nil {
			return "", fmt.Errorf("--pg-url-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	case c.PGURL == "":
		return "", fmt.Errorf("--pg-url (ORDERS_PG_URL) or --pg-url-file is required")
	}
	return c.PGURL, nil
}
