package poll

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/core"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/sink"
)

// server is the Postgres the tests create their databases in: a private
// cluster, or OUTBOX_TEST_PG_URL. Without Postgres the tests fail, never
// skip.
var server relaytest.Server

func TestMain(m *testing.M) {
	relaytest.RunWithServer(m, &server)
}

// running is a Poller running in the test process.
type running struct {
	p    *Poller
	reg  *prometheus.Registry
	stop func() error
}

// config is a polling configuration for env, with short waits.
func config(t *testing.T, env *relaytest.Env) Config {
	tpl, err := sink.ParseTemplate(env.Subject)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		PGURL: env.PGURL, Slot: env.Slot, Table: env.Table,
		Publishing: core.Publishing{Stream: env.Stream,
			Subject: tpl, DeadLetterSubject: env.DeadSubj, DuplicateWindow: env.DuplicateWindow, DrainTimeout: 10 * time.Second},
		Interval: 100 * time.Millisecond,
	}
}

// start runs a Poller with cfg until the test ends (or stop).
func start(t *testing.T, env *relaytest.Env, cfg Config) *running {
	t.Helper()
	nc, err := nats.Connect(env.NATSURL, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	if testing.Verbose() {
		log = log.Level(zerolog.InfoLevel)
	}
	p, err := New(cfg, core.Deps{NATS: nc, Registry: reg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	var runErr error
	r := &running{p: p, reg: reg, stop: func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
			nc.Close()
		})
		return runErr
	}}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("poller: %v", err)
		}
	})
	return r
}

// metric returns the value of a counter or gauge without labels (summed
// over labels), 0 when absent.
// metric is the sum of the series of name: counters and gauges by value,
// histograms by their count of observations.
func (r *running) metric(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// waitFor is relaytest.WaitFor under the name and argument order this
// package's tests use.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	relaytest.WaitFor(t, timeout, what, cond)
}

// pending counts the rows not processed yet.
func pending(t *testing.T, env *relaytest.Env) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+env.Table.Quoted()+` WHERE processed_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// pollEnv is a test environment whose table is migrated for polling: the
// migrations, then what `migrate --source poll` adds.
func pollEnv(t *testing.T) *relaytest.Env {
	t.Helper()
	env := relaytest.NewEnv(t, server)
	conn, err := pgx.ParseConfig(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.InstallPoll(context.Background(), conn, migrations.Names{Table: env.Table, Publication: env.Pub}); err != nil {
		t.Fatal(err)
	}
	return env
}
