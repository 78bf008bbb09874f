//go:build !nolab

package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/bench"
)

type benchCmd struct {
	// No environment variables for the servers: bench loads them hard and
	// creates tables, slots and streams; it touches a server it did not
	// start only when told so on its command line, twice.
	PGURL           string        `name:"pg-url" help:"Postgres to measure (wal_level=logical; the role creates tables, publications and slots named bench_* and writes millions of rows), with --allow-existing-db. Default: a throwaway cluster. Never read from OUTBOX_PG_URL."`
	AllowExistingDB bool          `name:"allow-existing-db" help:"Confirm that --pg-url may be loaded and written to: bench_* tables, publications and slots are created and dropped there."`
	NATSURL         string        `name:"nats-url" help:"NATS to measure (JetStream enabled; streams named BENCH_* are created and deleted). Default: a nats-server in a process of its own. Never read from OUTBOX_NATS_URL."`
	Events          int           `name:"events" default:"200000" help:"Backlog size of the drain runs (R1) and of the limits (L1, L2)."`
	Big             int           `name:"big" default:"1000000" help:"Size of the resource runs (R3): a backlog and one transaction of this many events; 0 skips them."`
	Cold            int           `name:"cold" default:"50000" help:"Backlog size of the cold-start drains (C1), at most --events: one-row and ten-row transactions of ~250-byte payloads and one-row transactions of ~4 KiB, and a tenth as many of ~64 KiB, each drained by a fresh relay process timed from its start, beside pg_recvlogical; 0 skips them."`
	Rates           string        `name:"rates" default:"1000,2500,5000" help:"Insert rates (events/s) of the latency runs (R2)."`
	Duration        time.Duration `name:"duration" default:"10s" help:"Length of each latency run."`
	Baseline        int           `name:"baseline" default:"20000" help:"Rows for the polling relay baseline (R4); 0 skips it."`
	Tables          int           `name:"tables" default:"0" help:"Backlog of each of two tables in the several-tables comparison (T1): one relay reading both tables on one slot against two relays reading one each; 0 skips it."`
	Split           int           `name:"split" default:"0" help:"Backlog of the one-slot against two-slots comparison (S1): one table read by pg_recvlogical through one slot, and through two slots whose publications split it with row filters on a hash of aggregate_id (Postgres 15+), side by side; 0 skips it."`
	Only            string        `name:"only" help:"Run only these measurements, comma-separated: limits (L1, L2, R1), cold (C1), latency (R2), resources (R3), baseline (R4), tables (T1), split (S1)."`
	Window          int           `name:"window" default:"${window}" help:"The relay's --window."`
	FastIngest      bool          `name:"fast-ingest" help:"Create the streams with allow_batched (the relay's --stream-allow-batched), so that the relays publish in fast-ingest batches."`
	// LatencyFile lets users plot a run: tails are easier to explain over time.
	LatencyFile string `name:"latency-file" type:"path" help:"Write every latency run's events as CSV (rate, stream sequence, commit and stored times in Unix µs, latency in µs) to this file."`
	Report      string `name:"report" type:"path" help:"Write the run's charts (drain curves, throughput against pg_recvlogical and JetStream, latency histograms) as one self-contained HTML page to this file (SVG, no script, nothing loaded: it opens offline)."`
	// JSON is what the docs quote: docs/bench/report.json.
	JSON string `name:"json" type:"path" help:"Write every figure of the run under a stable key as JSON to this file, with the commit, the machine (CPU, cores, memory), its load average during the run, the Go, Postgres and NATS versions and this command (docs/bench/report.json is the run the docs quote)."`
}

// Run runs the benchmark; the relays it measures (and its nats-server) are
// this program, started again.
func (c *benchCmd) Run(ctx context.Context) error {
	if c.PGURL != "" && !c.AllowExistingDB {
		return errors.New("--pg-url points bench at a database it did not create, where it writes millions of rows and creates bench_* tables, publications and slots: add --allow-existing-db if that is what you want, or leave --pg-url out for a throwaway cluster")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	return bench.Run(ctx, bench.Options{
		PGURL: c.PGURL, NATSURL: c.NATSURL, Events: c.Events, Big: c.Big, Cold: c.Cold, Rates: c.Rates, Duration: c.Duration,
		Baseline: c.Baseline, Tables: c.Tables, Split: c.Split, Only: c.Only, Window: c.Window, FastIngest: c.FastIngest, LatencyFile: c.LatencyFile, HTMLReport: c.Report, JSONReport: c.JSON,
		Self: self, Out: os.Stdout, Progress: os.Stderr,
	})
}
