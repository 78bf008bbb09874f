package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

type migrateCmd struct {
	pgFlags     `embed:""`
	Table       []string `name:"table" env:"OUTBOX_TABLE" default:"${table}" sep:"," help:"Outbox table, schema-qualified; several (the flag repeated, or comma-separated) for a relay of several tables: each is migrated and added to the one publication, and --relay-role is granted each."`
	Publication string   `name:"publication" env:"OUTBOX_PUBLICATION" default:"${publication}" help:"Publication to create for the tables (or add them to)."`
	Source      string   `name:"source" env:"OUTBOX_SOURCE" default:"wal" enum:"wal,poll" help:"With poll, also set the table up for run --source poll: seq's default and the pending index (built CONCURRENTLY), and with --relay-role the polling grants. WAL mode does without them: they cost every insert."`
	Notify      bool     `name:"notify" help:"Also install the NOTIFY trigger that wakes a polling relay (run --source poll) as soon as rows are inserted."`
	RelayRole   string   `name:"relay-role" env:"OUTBOX_RELAY_ROLE" help:"Also create this least-privilege role (LOGIN REPLICATION, no password; with --source poll LOGIN only) and grant it what the relay needs."`
}

func (c *migrateCmd) Run(ctx context.Context, log zerolog.Logger) error {
	tables, err := contract.ParseTables(c.Table...)
	if err != nil {
		return fmt.Errorf("--table: %w", err)
	}
	if err := replication.CheckName("publication", c.Publication); err != nil {
		return fmt.Errorf("--publication: %w", err)
	}
	if c.RelayRole != "" {
		if err := replication.CheckName("role", c.RelayRole); err != nil {
			return fmt.Errorf("--relay-role: %w", err)
		}
	}
	poolCfg, _, err := replication.ParseConnString(c.PGURL)
	if err != nil {
		return err
	}
	// Each table keeps its own migration history; all of them go into the
	// one publication a relay of several tables reads.
	for _, table := range tables {
		l := log
		if len(tables) > 1 {
			l = log.With().Str("table", table.String()).Logger()
		}
		if err := c.migrate(ctx, poolCfg.ConnConfig, migrations.Names{Table: table, Publication: c.Publication}, l); err != nil {
			return err
		}
	}
	return nil
}

// migrate applies the migrations of one table and what the flags add.
func (c *migrateCmd) migrate(ctx context.Context, conn *pgx.ConnConfig, names migrations.Names, log zerolog.Logger) error {
	applied, err := migrations.Apply(ctx, conn, names)
	if err != nil {
		return err
	}
	for _, a := range applied {
		log.Info().Str("migration", a).Msg("applied")
	}
	if len(applied) == 0 {
		log.Info().Msg("database already up to date")
	}
	// The table may have been migrated for another publication before
	// (a relay of one table that now reads several): add it to this one.
	if err := migrations.AddToPublication(ctx, conn, names); err != nil {
		return err
	}
	if c.Source == sourcePoll {
		log.Info().Str("index", names.PendingIndex()).Msg("setting the table up for polling (CREATE INDEX CONCURRENTLY: inserts go on; a large table takes a while)")
		if err := migrations.InstallPoll(ctx, conn, names); err != nil {
			return err
		}
		log.Info().Msg("table ready for run --source poll")
	}
	if c.Notify {
		if err := migrations.InstallNotify(ctx, conn, names); err != nil {
			return err
		}
		log.Info().Str("channel", names.NotifyChannel()).Msg("notify trigger installed")
	}
	if c.RelayRole != "" {
		grant := migrations.GrantRole
		if c.Source == sourcePoll {
			grant = migrations.GrantPollRole
		}
		if err := grant(ctx, conn, names, c.RelayRole); err != nil {
			return err
		}
		log.Info().Str("role", c.RelayRole).Msg("role ready: set its password (ALTER ROLE ... PASSWORD) and allow it in pg_hba.conf for this database")
	}
	return nil
}
