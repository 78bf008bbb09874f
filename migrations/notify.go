package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the channel the polling relay listens on for new rows
// of the outbox table (see InstallNotify).
func (n Names) NotifyChannel() string { return n.Table.Schema + "." + n.Table.Name }

// NotifyTrigger is the unquoted name of the trigger InstallNotify creates
// on the outbox table.
func (n Names) NotifyTrigger() string { return n.Table.Name + "_insert_notify" }

// InstallNotify creates (or replaces) the seed article's LISTEN/NOTIFY
// wake-up: a trigger that notifies NotifyChannel after each statement that
// inserts into the outbox table, so that a polling relay publishes new rows
// at once rather than at its next poll. It is one notification per
// statement, not per row (the relay reads the table, not the payload), and
// Postgres folds equal notifications of one transaction into one.
//
// Notifications are sent at commit under a lock shared by every notifying
// transaction of the cluster: at thousands of commits a second that lock
// shows; the relay's fallback poll interval works without the trigger.
func InstallNotify(ctx context.Context, conn *pgx.ConnConfig, n Names) error {
	c, err := pgx.ConnectConfig(ctx, conn)
	if err != nil {
		return fmt.Errorf("connect to install the notify trigger: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	fn := pgx.Identifier{n.Table.Schema, n.Table.Name + "_notify_insert"}.Sanitize()
	trigger := pgx.Identifier{n.NotifyTrigger()}.Sanitize()
	stmts := []string{
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(%s, '');
    RETURN NULL;
END;
$$`, fn, literal(n.NotifyChannel())),
		fmt.Sprintf(`DROP TRIGGER IF EXISTS %s ON %s`, trigger, n.Table.Quoted()),
		fmt.Sprintf(`CREATE TRIGGER %s AFTER INSERT ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s()`, trigger, n.Table.Quoted(), fn),
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("install the notify trigger: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("install the notify trigger on %s: %w", n.Table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("install the notify trigger on %s: %w", n.Table, err)
	}
	return nil
}
