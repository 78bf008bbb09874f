package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// scenario is one benchmark run's own outbox table, publication, slot
// and stream, so runs never see each other's events.
type scenario struct {
	name              string
	slot, publication string
	table             contract.Table
	// more are further tables of a relay of several (T1); empty for one.
	more       []contract.Table
	stream     string
	subject    sink.Template
	deadLetter string
}

func newScenario(name string) (scenario, error) {
	s := scenario{name: name, slot: "bench_" + name, publication: "bench_" + name,
		stream: "BENCH_" + strings.ToUpper(name), deadLetter: "bench_" + name + "_dead_letter"}
	var err error
	if s.table, err = contract.ParseTable("public.bench_" + name); err != nil {
		return s, err
	}
	if s.subject, err = sink.ParseTemplate("bench_" + name + ".{aggregate_type}.{event_type}"); err != nil {
		return s, err
	}
	if err := replication.CheckName("slot", s.slot); err != nil {
		return s, err
	}
	return s, nil
}

// relayArgs are the flags that run the relay on this scenario.
func (s scenario) relayArgs(pgURL, natsURL string, window int) []string {
	args := []string{"run", "--pg-url", pgURL, "--nats-url", natsURL, "--slot", s.slot, "--publication", s.publication,
		"--table", s.table.String(), "--stream", s.stream, "--subject", s.subject.String(), "--dead-letter-subject", s.deadLetter,
		"--window", strconv.Itoa(window), "--metrics-addr", "", "--log-format", "json"}
	for _, t := range s.more {
		args = append(args, "--table", t.String())
	}
	return args
}

// relayArgs are the flags that run the relay on sc in this benchmark.
func (b *bench) relayArgs(sc scenario) []string {
	args := sc.relayArgs(b.pgURL, b.natsURL, b.cfg.Window)
	if b.cfg.FastIngest {
		args = append(args, "--stream-allow-batched")
	}
	return args
}

// prepare creates the scenario's table (through the migrations, like a
// user would) and the procedure that fills it.
func (s scenario) prepare(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := migrations.Apply(ctx, pool.Config().ConnConfig, migrations.Names{Table: s.table, Publication: s.publication}); err != nil {
		return err
	}
	for _, proc := range []string{fillProcedure, fillSizedProcedure} {
		if _, err := pool.Exec(ctx, proc); err != nil {
			return err
		}
	}
	paced := strings.NewReplacer("{{name}}", s.name, "{{table}}", s.table.Quoted()).Replace(pacedProcedure)
	_, err := pool.Exec(ctx, paced)
	return err
}

// pacedName is the scenario's paced writer procedure.
func (s scenario) pacedName() string { return "outbox_bench_paced_" + s.name }

// fillProcedure writes n outbox rows, per_txn rows per transaction, with
// ~200-byte JSON payloads over 1,000 aggregates, all inside Postgres so
// the benchmark measures the relay, not the client that fills the table.
const fillProcedure = `CREATE OR REPLACE PROCEDURE outbox_bench_fill(tbl regclass, n int, per_txn int) LANGUAGE plpgsql AS $$
DECLARE i int := 0;
BEGIN
	SET LOCAL synchronous_commit = off;
	WHILE i < n LOOP
		EXECUTE format($q$INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'order', (g %% 1000)::text, 'order.created', jsonb_build_object(
				'order_id', g, 'customer_id', 'customer-' || (g %% 1000), 'total', (g %% 997) * 1.25, 'currency', 'EUR',
				'items', jsonb_build_array(jsonb_build_object('sku', 'sku-' || (g %% 50), 'qty', 1 + g %% 3)),
				'note', repeat('x', 60))
			FROM generate_series($1, $2) g$q$, tbl) USING i, least(i + per_txn, n) - 1;
		COMMIT;
		SET LOCAL synchronous_commit = off;
		i := i + per_txn;
	END LOOP;
END $$`

// fillSizedProcedure writes n outbox rows, per_txn rows per transaction,
// with JSON payloads of about size bytes of text: an order whose line
// items grow with the size (distinct values, so TOAST compresses them as
// it would real documents, not as a run of one letter), padded to the
// size with a note.
const fillSizedProcedure = `CREATE OR REPLACE PROCEDURE outbox_bench_fill_sized(tbl regclass, n int, per_txn int, size int) LANGUAGE plpgsql AS $$
DECLARE i int := 0;
BEGIN
	SET LOCAL synchronous_commit = off;
	WHILE i < n LOOP
		EXECUTE format($q$INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'order', (g %% 1000)::text, 'order.created', p || jsonb_build_object('note', repeat('x', greatest($3 - octet_length(p::text) - 12, 1)))
			FROM (SELECT g, jsonb_build_object('order_id', g, 'customer_id', 'customer-' || (g %% 1000), 'total', (g %% 997) * 1.25, 'currency', 'EUR',
					'items', (SELECT jsonb_agg(jsonb_build_object('sku', 'sku-' || ((g + k) %% 9973), 'qty', 1 + (g + k) %% 3,
						'price', ((g * k) %% 10000) / 100.0, 'name', left(md5((g * 31 + k)::text), 16)))
						FROM generate_series(1, greatest(($3 - 200) / 90, 1)) k)) AS p
				FROM generate_series($1, $2) g) s$q$, tbl) USING i, least(i + per_txn, n) - 1, size;
		COMMIT;
		SET LOCAL synchronous_commit = off;
		i := i + per_txn;
	END LOOP;
END $$`

// pacedProcedure commits one-row transactions at a fixed rate, inside
// Postgres: the load generator must not be what saturates the machine.
// Each payload records clock_timestamp() just before its COMMIT (order_id
// k, written_at), and the procedure returns, for its i-th event (k = i *
// workers + worker), when that COMMIT returned, in Unix microseconds: the
// event is durable and visible from then on.
//
// The table is written into the procedure's text, not passed in: static
// SQL keeps its plan, and the writers cost the machine less time.
const pacedProcedure = `CREATE OR REPLACE PROCEDURE outbox_bench_paced_{{name}}(rate float8, seconds float8, worker int, workers int, INOUT committed bigint[]) LANGUAGE plpgsql AS $$
DECLARE
	start timestamptz := clock_timestamp();
	n int := (rate * seconds / workers)::int;
	target timestamptz;
	k int;
BEGIN
	committed := '{}';
	FOR i IN 0 .. n - 1 LOOP
		k := i * workers + worker;
		target := start + make_interval(secs => k / rate);
		IF clock_timestamp() < target THEN
			PERFORM pg_sleep(extract(epoch FROM target - clock_timestamp()));
		END IF;
		INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', (k % 1000)::text, 'order.created', jsonb_build_object('order_id', k, 'note', repeat('x', 120), 'written_at', clock_timestamp()));
		COMMIT;
		committed := committed || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	END LOOP;
END $$`

// fill writes n rows in transactions of perTxn rows and returns the WAL
// position after them.
func (s scenario) fill(ctx context.Context, pool *pgxpool.Pool, n, perTxn int) (pglogrepl.LSN, error) {
	return s.call(ctx, pool, fmt.Sprintf("CALL outbox_bench_fill('%s', %d, %d)", s.table.Quoted(), n, perTxn))
}

// fillSized is fill with payloads of about size bytes.
func (s scenario) fillSized(ctx context.Context, pool *pgxpool.Pool, n, perTxn, size int) (pglogrepl.LSN, error) {
	return s.call(ctx, pool, fmt.Sprintf("CALL outbox_bench_fill_sized('%s', %d, %d, %d)", s.table.Quoted(), n, perTxn, size))
}

// call runs a fill procedure and returns the WAL insert position after
// it: the end of its last commit record when nothing else writes. Not
// pg_current_wal_lsn(), the position written so far: the procedures
// commit asynchronously, and a reader stopping there (pg_recvlogical
// --endpos) would miss the last events.
func (s scenario) call(ctx context.Context, pool *pgxpool.Pool, sql string) (pglogrepl.LSN, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Conn().PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return 0, fmt.Errorf("fill %s: %w", s.table, err)
	}
	var lsn pglogrepl.LSN
	err = conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// quiesce does now the work a fresh backlog leaves to background
// processes (autovacuum of the new rows, a checkpoint for the WAL just
// written), so it does not land inside whichever measurement runs first.
// It is best effort: a role without the right to checkpoint only gets a
// note.
func (s scenario) quiesce(ctx context.Context, pool *pgxpool.Pool, progress func(string, ...any)) {
	for _, sql := range []string{"VACUUM (ANALYZE) " + s.table.Quoted(), "CHECKPOINT"} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			progress("  %s failed (%v): background work may overlap the first measurement", sql, err)
		}
	}
}

// payloadSize returns the average payload size of the scenario's rows.
func (s scenario) payloadSize(ctx context.Context, pool *pgxpool.Pool) int {
	var avg float64
	_ = pool.QueryRow(ctx, `SELECT COALESCE(avg(octet_length(payload::text)), 0) FROM `+s.table.Quoted()).Scan(&avg)
	return int(avg)
}

// createSlot creates a plain pgoutput slot for a reader that is not the relay.
func createSlot(ctx context.Context, pool *pgxpool.Pool, slot string) error {
	_, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	return err
}

// waitDrained waits until the slot confirmed end and the stream holds n
// relay messages.
func waitDrained(ctx context.Context, pool *pgxpool.Pool, slot string, end pglogrepl.LSN, count func() uint64, n int) error {
	for {
		info, err := replication.LookupSlot(ctx, pool, slot)
		if err != nil {
			return err
		}
		if !info.Exists {
			return fmt.Errorf("slot %s disappeared during the drain", slot)
		}
		confirmed := info.ConfirmedFlush
		if confirmed >= end && count() >= uint64(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not drained: slot at %s of %s, %d of %d messages stored: %w", confirmed, end, count(), n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// slotPID returns the walsender serving the slot, 0 if none.
func slotPID(ctx context.Context, pool *pgxpool.Pool, slot string) int {
	info, _ := replication.LookupSlot(ctx, pool, slot)
	return int(info.ActivePID)
}

// sampleEvent is an event like the benchmark's rows, for the JetStream
// limit measurement.
func sampleEvent(i int, payloadSize int) decode.Event {
	payload := fmt.Sprintf(`{"note": "%s", "order_id": %d}`, strings.Repeat("x", max(payloadSize-30, 1)), i)
	return decode.Event{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), AggregateType: "order", AggregateID: fmt.Sprint(i % 1000),
		EventType: "order.created", Payload: []byte(payload), CreatedAt: "2026-12-02T11:36:09.123456Z",
		Position: decode.Position{CommitLSN: pglogrepl.LSN(0x1000000 + i*64), Index: 0}}
}
