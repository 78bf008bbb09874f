package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/retention"
)

// BenchmarkCleanup measures a cleanup run over rows the relay confirmed:
// deleting them (old rows), or marking processed_at (recent rows), in
// batches of 1000, with the rows and WAL bytes per second and per row.
//
//	go test -run '^$' -bench BenchmarkCleanup -benchtime 3x ./retention/
func BenchmarkCleanup(b *testing.B) {
	const rows = 100_000
	env := relaytest.NewEnv(b, server)
	startRelay(b, env)
	for _, c := range []struct {
		name string
		age  time.Duration
	}{{"delete", 30 * 24 * time.Hour}, {"mark", 0}} {
		b.Run(c.name, func(b *testing.B) {
			var total, wal int64
			var took time.Duration
			for range b.N {
				b.StopTimer()
				env.Exec(`INSERT INTO `+env.Table.Quoted()+` (aggregate_type, aggregate_id, event_type, payload, created_at)
					SELECT 'bench', 'b' || (i % 100), 'queued', jsonb_build_object('n', i), now() - $2::interval FROM generate_series(1, $1) AS i`,
					rows, c.age.String())
				env.WaitSlotCaughtUp(time.Minute)
				before := walPosition(b, env)
				b.StartTimer()
				start := time.Now()
				rep, err := retention.Run(context.Background(), env.Pool, retention.Config{Table: env.Table, Slot: env.Slot,
					Retention: 7 * 24 * time.Hour, Batch: retention.DefaultBatch, Wait: time.Minute, MarkProcessed: true}, zerolog.Nop())
				took += time.Since(start)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				total += rep.Deleted + rep.Marked
				wal += int64(walPosition(b, env) - before)
				env.Exec(`DELETE FROM ` + env.Table.Quoted())
				env.Exec(`VACUUM ` + env.Table.Quoted())
			}
			b.ReportMetric(float64(total)/took.Seconds(), "rows/s")
			b.ReportMetric(float64(wal)/float64(total), "WAL-bytes/row")
		})
	}
}

func walPosition(b *testing.B, env *relaytest.Env) pglogrepl.LSN {
	var lsn pglogrepl.LSN
	if err := env.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}
