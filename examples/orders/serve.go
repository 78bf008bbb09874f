package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/consumer"
	"github.com/outbox-relay/outbox-relay/examples/orders/orders"
)

// run wires the service: Postgres and NATS connections, the example's
// tables, the HTTP server, the billing consumer and the demo orders, each
// in a goroutine run waits for.
func run(ctx context.Context, c cli, log zerolog.Logger) error {
	url, err := c.pgURL()
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if err := orders.Migrate(ctx, pool); err != nil {
		return err
	}
	svc, err := orders.NewService(pool)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(c.NATSURL, nats.Name("orders example"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 3)
	go func() { done <- serveHTTP(ctx, c.HTTPAddr, svc, log) }()
	go func() { done <- consume(ctx, c, pool, js, log) }()
	go func() { done <- demo(ctx, c.DemoEvery, svc, log) }()
	var errs []error
	for range 3 {
		if err := <-done; err != nil {
			errs = append(errs, err)
			cancel(err) // one part failing stops the others
		}
	}
	return errors.Join(errs...)
}

// consume runs the billing consumer once the relay has created the stream.
func consume(ctx context.Context, c cli, pool *pgxpool.Pool, js jetstream.JetStream, log zerolog.Logger) error {
	for {
		if _, err := js.Stream(ctx, c.Stream); err == nil {
			break
		}
		log.Info().Str("stream", c.Stream).Msg("waiting for the relay to create the stream")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	cons, err := orders.BillingConsumer(ctx, js, c.Stream, c.Consumer, c.Filter)
	if err != nil {
		return err
	}
	billing, err := orders.NewBilling(pool, cons, consumer.WithLogger(log))
	if err != nil {
		return err
	}
	return billing.Run(ctx)
}

// demo creates an order every interval (never when interval is 0).
func demo(ctx context.Context, interval time.Duration, svc *orders.Service, log zerolog.Logger) error {
	if interval <= 0 {
		return nil
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		o := orders.Order{ID: NewOrderID(), CustomerID: fmt.Sprintf("customer-%d", n%3+1), Total: int64(1000 + n%90*100 + 99)}
		id, err := svc.CreateOrder(ctx, o)
		if err != nil {
			log.Warn().Err(err).Msg("demo order")
			continue
		}
		log.Info().Str("order_id", o.ID).Str("event_id", id).Msg("order created")
	}
}

// NewOrderID returns a random order id.
func NewOrderID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ord-" + hex.EncodeToString(b)
}

// serveHTTP serves POST /orders and GET /healthz until ctx ends.
func serveHTTP(ctx context.Context, addr string, svc *orders.Service, log zerolog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var o orders.Order
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&o); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if o.ID == "" {
			o.ID = NewOrderID()
		}
		id, err := svc.CreateOrder(r.Context(), o)
		if err != nil {
			log.Warn().Err(err).Msg("create order")
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"order_id": o.ID, "event_id": id})
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info().Str("addr", ln.Addr().String()).Msg("serving POST /orders and GET /healthz")
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
		return nil
	}
}
