package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/retention"
)

type cleanupCmd struct {
	pgFlags        `embed:""`
	Source         string        `name:"source" env:"OUTBOX_SOURCE" default:"wal" enum:"wal,poll" help:"What published the rows: wal (trust the slot's confirmations) or poll (trust processed_at, which run --source poll sets after each PubAck; no slot is read)."`
	Slot           string        `name:"slot" env:"OUTBOX_SLOT" default:"${slot}" help:"The relay's replication slot: only what it confirmed is deleted."`
	Table          []string      `name:"table" env:"OUTBOX_TABLE" default:"${table}" sep:"," help:"Outbox table, schema-qualified; the relay's tables, in its order, when it reads several (each is cleaned up)."`
	Retention      time.Duration `name:"retention" env:"OUTBOX_RETENTION" default:"${retention}" help:"Keep rows created less than this long ago, confirmed or not."`
	Batch          int           `name:"batch" env:"OUTBOX_CLEANUP_BATCH" default:"${cleanup_batch}" help:"Rows deleted or marked per transaction."`
	Wait           time.Duration `name:"wait" default:"${cleanup_wait}" help:"How long to wait for the slot to confirm the WAL written before this run (0: rely on earlier runs only)."`
	DryRun         bool          `name:"dry-run" help:"Print what would be deleted, marked and dropped; change nothing in the table."`
	MarkProcessed  bool          `name:"mark-processed" default:"true" negatable:"" help:"Set processed_at on the confirmed rows kept, so that processed_at IS NULL means not yet confirmed."`
	DropPartitions bool          `name:"drop-partitions" help:"Drop partitions (RANGE on created_at) that end before the retention and whose rows are all confirmed."`
	LockTimeout    time.Duration `name:"lock-timeout" default:"${cleanup_lock_timeout}" help:"How long dropping a partition may wait for the table's writers (and hold them)."`
}

// cleanupDefaults are the cleanup flags' defaults, from package retention.
func cleanupDefaults() kong.Vars {
	return kong.Vars{
		"retention":            shortDuration(retention.DefaultRetention),
		"cleanup_batch":        strconv.Itoa(retention.DefaultBatch),
		"cleanup_wait":         shortDuration(retention.DefaultWait),
		"cleanup_lock_timeout": shortDuration(retention.DefaultLockTimeout),
	}
}

func (c *cleanupCmd) Run(ctx context.Context, log zerolog.Logger) error {
	tables, err := contract.ParseTables(c.Table...)
	if err != nil {
		return fmt.Errorf("--table: %w", err)
	}
	if err := replication.CheckName("slot", c.Slot); err != nil {
		return fmt.Errorf("--slot: %w", err)
	}
	several := len(tables) > 1
	if several && c.Source == sourcePoll {
		return fmt.Errorf("--source poll with %d tables (%s): a polling relay reads one table; clean each up with its own command", len(tables), contract.JoinTables(tables))
	}
	pool, err := openPoolOnly(ctx, c.PGURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	// A relay of several tables keeps its record and dead letters in its
	// first table's schema, keyed by qualified id.
	for _, table := range tables {
		rep, err := retention.Run(ctx, pool, retention.Config{
			Table: table, Slot: c.Slot, RecordSchema: tables[0].Schema, QualifiedKeys: several,
			Retention: c.Retention, Batch: c.Batch, Wait: c.Wait,
			DryRun: c.DryRun, MarkProcessed: c.MarkProcessed, DropPartitions: c.DropPartitions, LockTimeout: c.LockTimeout,
			ProcessedOnly: c.Source == sourcePoll, Progress: progressTo(log),
		}, log)
		if err != nil {
			return err
		}
		if several {
			fmt.Printf("%s: ", table)
		}
		printCleanup(rep)
	}
	return nil
}

func printCleanup(r retention.Report) {
	if !r.HasMark {
		fmt.Printf("nothing deleted: the slot (confirmed %s) has not yet passed a cleanup mark; run again once the relay has confirmed (or with a longer --wait)\n", r.Confirmed)
		return
	}
	verb, marked, dropped := "deleted", "marked processed", "dropped"
	if r.DryRun {
		verb, marked, dropped = "would delete", "would mark processed", "would drop"
	}
	if r.Confirmed != 0 {
		fmt.Printf("slot confirmed %s, mark %s; ", r.Confirmed, r.Mark.WALLSN)
	}
	fmt.Printf("rows created before %s:\n", r.Cutoff.UTC().Format(time.RFC3339))
	fmt.Printf("  %s: %d rows\n", verb, r.Deleted)
	fmt.Printf("  %s: %d newer confirmed rows\n", marked, r.Marked)
	fmt.Printf("  kept: %d dead letters (for dlq retry)\n", r.DeadLetters)
	if r.DryRun {
		fmt.Printf("  kept: %d rows not confirmed yet\n", r.Unconfirmed)
	}
	if len(r.Dropped) > 0 {
		fmt.Printf("  %s: %s\n", dropped, strings.Join(r.Dropped, ", "))
	}
	if len(r.Busy) > 0 {
		fmt.Printf("  busy (next run): %s\n", strings.Join(r.Busy, ", "))
	}
}
