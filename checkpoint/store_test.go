package checkpoint_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// TestStoreOnRealPostgres writes and reads the slot record in the tables
// the migrations create; positions go in and come out as pglogrepl.LSN.
func TestStoreOnRealPostgres(t *testing.T) {
	cluster, err := relaytest.StartCluster(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := cluster.URL("postgres")
	connCfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	table := contract.Table{Schema: "public", Name: "outbox_events"}
	if _, err := migrations.Apply(ctx, connCfg, migrations.Names{Table: table, Publication: contract.DefaultPublication}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := checkpoint.NewStore(pool, table.Schema, contract.DefaultSlot)

	load := func() checkpoint.Record {
		t.Helper()
		r, err := store.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := load(); r.Exists {
		t.Fatalf("Load before Create = %+v; want no record", r)
	}
	created := pglogrepl.LSN(0x1_0000_2A00) // 1/2A00: both halves matter
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := store.Begin(ctx, checkpoint.KindRepair, since); err != nil {
		t.Fatal(err)
	}
	if r := load(); !r.Exists || r.Bootstrapped || r.CreatedLSN != 0 || r.Kind != checkpoint.KindRepair || !r.RepairSince.Equal(since) {
		t.Fatalf("Load after Begin = %+v; want an unfinished repair since %s, creation not recorded", r, since)
	}
	if err := store.Created(ctx, created, "pub-identity"); err != nil {
		t.Fatal(err)
	}
	if err := store.Created(ctx, created+1, "pub-identity"); !errors.Is(err, checkpoint.ErrRecordChanged) {
		t.Fatalf("a second Created = %v; want ErrRecordChanged", err)
	}
	if err := store.MarkBootstrapped(ctx, created+1); !errors.Is(err, checkpoint.ErrRecordChanged) {
		t.Fatalf("MarkBootstrapped of another creation point = %v; want ErrRecordChanged", err)
	}
	if err := store.MarkBootstrapped(ctx, created); err != nil {
		t.Fatal(err)
	}
	if err := store.RaiseLimit(ctx, created+0x100); err != nil {
		t.Fatal(err)
	}
	if err := store.RaiseLimit(ctx, created+0x10); err != nil { // never lowers it
		t.Fatal(err)
	}
	want := checkpoint.Record{Exists: true, CreatedLSN: created, Limit: created + 0x100, Bootstrapped: true,
		Kind: checkpoint.KindRepair, Publication: "pub-identity"}
	if r := load(); r.CreatedLSN != want.CreatedLSN || r.Limit != want.Limit || !r.Bootstrapped || r.Kind != want.Kind || r.Publication != want.Publication {
		t.Fatalf("Load after RaiseLimit = %+v; want %+v", r, want)
	}
	// A clean stop records where the relay stopped; a session that
	// streams clears it; a stop recorded for another slot's creation
	// point changes nothing.
	if err := store.RecordStop(ctx, created, created+0x80); err != nil || load().Stopped != created+0x80 || load().Allowed() != created+0x80 {
		t.Fatalf("after RecordStop (%v): %+v; want stopped, and allowed, at %s", err, load(), created+0x80)
	}
	if err := store.ClearStop(ctx, created); err != nil || load().Stopped != 0 || load().Allowed() != created+0x100+checkpoint.Slack {
		t.Fatalf("after ClearStop (%v): %+v; want no stop, the limit plus the slack allowed", err, load())
	}
	if err := store.RecordStop(ctx, created+1, created+0x80); err != nil || load().Stopped != 0 {
		t.Fatalf("RecordStop for another creation point (%v): %+v; want no stop recorded", err, load())
	}
	if err := store.RecordStop(ctx, created, created+0x90); err != nil {
		t.Fatal(err)
	}
	if err := store.RecordDeadLetter(ctx, "ev-1", "too big", created+0x20); err != nil {
		t.Fatal(err)
	}
	var deadAt pglogrepl.LSN
	if err := pool.QueryRow(ctx, `SELECT commit_lsn FROM `+checkpoint.DeadLettersTable+` WHERE event_id = 'ev-1'`).Scan(&deadAt); err != nil || deadAt != created+0x20 {
		t.Fatalf("dead letter commit_lsn = %s, %v; want %s", deadAt, err, created+0x20)
	}
	retried := func() bool {
		t.Helper()
		var r bool
		if err := pool.QueryRow(ctx, `SELECT retried_at IS NOT NULL FROM `+checkpoint.DeadLettersTable+` WHERE event_id = 'ev-1'`).Scan(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if _, err := pool.Exec(ctx, `UPDATE `+checkpoint.DeadLettersTable+` SET retried_at = now() WHERE event_id = 'ev-1'`); err != nil {
		t.Fatal(err)
	}
	// Replayed after a restart: the same commit dead-letters it again.
	if err := store.RecordDeadLetter(ctx, "ev-1", "too big", created+0x20); err != nil || !retried() {
		t.Fatalf("a replay of the same dead letter (%v) cleared retried_at", err)
	}
	// A retry refused again (read from the table: commit LSN 0) is a new
	// dead letter.
	if err := store.RecordDeadLetter(ctx, "ev-1", "still too big", 0); err != nil || retried() {
		t.Fatalf("a new dead-lettering (%v) kept retried_at", err)
	}
	if err := store.Begin(ctx, checkpoint.KindInitial, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if r := load(); r.Bootstrapped || r.Kind != checkpoint.KindInitial || !r.RepairSince.IsZero() || r.Publication != "" || r.Stopped != 0 {
		t.Fatalf("Load after a new Begin = %+v; want a fresh unfinished initial take-up", r)
	}
}
