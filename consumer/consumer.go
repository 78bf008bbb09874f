package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// Permanent marks err as one that retrying cannot cure (a payload the
// handler cannot read): the message is recorded in failed_events and
// terminated without further deliveries.
func Permanent(err error) error { return &permanentError{err} }

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Defaults of the options.
const (
	DefaultMaxDeliveries = 5
	DefaultBackoff       = time.Second
	DefaultMaxBackoff    = time.Minute
	DefaultPullBatch     = 10
	DefaultDrainTimeout  = 30 * time.Second
)

// A Consumer runs a Handler for the messages of a JetStream pull consumer.
type Consumer struct {
	db    backend // pgx (New) or database/sql (NewSQL)
	cons  jetstream.Consumer
	store store
	log   zerolog.Logger

	name          string
	maxDeliveries uint64
	backoff       time.Duration
	maxBackoff    time.Duration
	pullBatch     int
	drainTimeout  time.Duration
	ackWait       time.Duration
	txOptions     *pgx.TxOptions // WithTxOptions, for New
	sqlTxOptions  *sql.TxOptions // WithSQLTxOptions, for NewSQL
	schema        string
	tracer        trace.Tracer // WithTracerProvider; nil: no span of its own
}

// Option configures a Consumer.
type Option func(*Consumer) error

// WithName sets the consumer's name in processed_events and failed_events
// (default: the durable consumer's name). Consumers with the same name
// share their record of processed events.
func WithName(name string) Option {
	return func(c *Consumer) error {
		if name == "" {
			return errors.New("consumer: empty name")
		}
		c.name = name
		return nil
	}
}

// WithSchema sets the schema of processed_events and failed_events
// (default public).
func WithSchema(schema string) Option {
	return func(c *Consumer) error { c.schema = schema; return nil }
}

// WithMaxDeliveries sets on which delivery a failing handler makes the
// message recorded and terminated (default DefaultMaxDeliveries).
func WithMaxDeliveries(n int) Option {
	return func(c *Consumer) error {
		if n < 1 {
			return fmt.Errorf("consumer: max deliveries %d: want at least 1", n)
		}
		c.maxDeliveries = uint64(n)
		return nil
	}
}

// WithBackoff sets the redelivery delay after the first failed delivery
// (base) and its ceiling (max); the delay doubles with each delivery.
func WithBackoff(base, max time.Duration) Option {
	return func(c *Consumer) error {
		if base <= 0 || max < base {
			return fmt.Errorf("consumer: backoff %s up to %s: want 0 < base <= max", base, max)
		}
		c.backoff, c.maxBackoff = base, max
		return nil
	}
}

// WithPullBatch sets how many messages are buffered ahead of the handler
// (default DefaultPullBatch). A buffered message's AckWait is already
// running: keep batch × handler time well below it.
func WithPullBatch(n int) Option {
	return func(c *Consumer) error {
		if n < 1 {
			return fmt.Errorf("consumer: pull batch %d: want at least 1", n)
		}
		c.pullBatch = n
		return nil
	}
}

// WithDrainTimeout bounds how long Run goes on handling buffered messages
// after ctx ends (default DefaultDrainTimeout). The handler in progress
// then sees its context cancelled.
func WithDrainTimeout(d time.Duration) Option {
	return func(c *Consumer) error {
		if d <= 0 {
			return fmt.Errorf("consumer: drain timeout %s: want > 0", d)
		}
		c.drainTimeout = d
		return nil
	}
}

// WithTxOptions sets the options of the handler's transaction (isolation
// level, for example), for a Consumer made by New.
func WithTxOptions(o pgx.TxOptions) Option {
	return func(c *Consumer) error { c.txOptions = &o; return nil }
}

// WithSQLTxOptions is WithTxOptions for a Consumer made by NewSQL.
func WithSQLTxOptions(o sql.TxOptions) Option {
	return func(c *Consumer) error { c.sqlTxOptions = &o; return nil }
}

// WithLogger sets the logger (default none).
func WithLogger(l zerolog.Logger) Option {
	return func(c *Consumer) error { c.log = l; return nil }
}

// newConsumer applies opts, checks cons and builds the database side with
// db once the options are known.
func newConsumer(cons jetstream.Consumer, opts []Option, db func(*Consumer) (backend, error)) (*Consumer, error) {
	c := &Consumer{
		cons: cons, log: zerolog.Nop(), schema: "public",
		maxDeliveries: DefaultMaxDeliveries, backoff: DefaultBackoff, maxBackoff: DefaultMaxBackoff,
		pullBatch: DefaultPullBatch, drainTimeout: DefaultDrainTimeout,
	}
	info := cons.CachedInfo()
	if info == nil {
		return nil, errors.New("consumer: the JetStream consumer has no info")
	}
	cfg := info.Config
	c.name = cfg.Durable
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	switch {
	case c.name == "":
		return nil, fmt.Errorf("consumer %q on stream %s is ephemeral: use a durable consumer, or give the name its processed events are recorded under with WithName", info.Name, info.Stream)
	case cfg.AckPolicy != jetstream.AckExplicitPolicy:
		return nil, fmt.Errorf("consumer %q has ack policy %s: want explicit, so that a message is acknowledged only after its transaction commits", info.Name, cfg.AckPolicy)
	case cfg.MaxDeliver > 0:
		return nil, fmt.Errorf("consumer %q has MaxDeliver %d: the server would stop redelivering a message without it being recorded (after an outage of Postgres, say); leave MaxDeliver unset and use WithMaxDeliveries", info.Name, cfg.MaxDeliver)
	}
	c.ackWait = cfg.AckWait
	if c.ackWait <= 0 {
		c.ackWait = 30 * time.Second // the server's default
	}
	st, err := newStore(c.schema)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c.store = st
	if c.db, err = db(c); err != nil {
		return nil, err
	}
	c.log = c.log.With().Str("component", "consumer").Str("consumer", c.name).Logger()
	return c, nil
}

// Name returns the name the consumer records events under.
func (c *Consumer) Name() string { return c.name }

// Run handles messages until ctx ends, then drains (see the package
// Guarantees) and returns nil. It returns an error if the tables are
// missing or wrong, or if the JetStream consumer goes away.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.store.check(ctx, c.db); err != nil {
		return fmt.Errorf("consumer %q: %w", c.name, err)
	}
	it, err := c.cons.Messages(jetstream.PullMaxMessages(c.pullBatch))
	if err != nil {
		return fmt.Errorf("consumer %q: pull messages: %w", c.name, err)
	}
	defer it.Stop()

	// Messages go on being handled for drainTimeout after ctx ends.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopAfter := context.AfterFunc(ctx, func() {
		it.Drain()
		time.AfterFunc(c.drainTimeout, cancelWork)
	})
	defer stopAfter()

	c.log.Info().Int("pull_batch", c.pullBatch).Uint64("max_deliveries", c.maxDeliveries).Msg("consuming")
	for {
		jm, err := it.Next()
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				c.log.Info().Msg("drained")
				return nil
			}
			return fmt.Errorf("consumer %q: next message: %w", c.name, err)
		}
		if work.Err() != nil {
			c.nak(jm, 0, "drain timeout")
			continue
		}
		c.process(work, jm)
	}
}
