package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/relay"
)

type dlqCmd struct {
	List  dlqListCmd  `cmd:"" help:"List the events the relay sent to the dead-letter subject, with the reason."`
	Retry dlqRetryCmd `cmd:"" help:"Publish dead-lettered events again from the outbox table (after fixing their rows or the limits)."`
}

type dlqListCmd struct {
	pgFlags `embed:""`
	Table   string `name:"table" env:"OUTBOX_TABLE" default:"${table}" help:"Outbox table, schema-qualified."`
	All     bool   `name:"all" help:"Include events already retried."`
	JSON    bool   `name:"json" help:"Print JSON."`
}

// deadLetter is one row of `dlq list`.
type deadLetter struct {
	EventID       string     `json:"event_id"`
	Reason        string     `json:"reason"`
	CommitLSN     string     `json:"commit_lsn"`
	DeadLettered  time.Time  `json:"dead_lettered_at"`
	Retried       *time.Time `json:"retried_at,omitempty"`
	AggregateType *string    `json:"aggregate_type,omitempty"`
	AggregateID   *string    `json:"aggregate_id,omitempty"`
	EventType     *string    `json:"event_type,omitempty"`
}

func (c *dlqListCmd) Run(ctx context.Context, log zerolog.Logger) error {
	table, err := contract.ParseTable(c.Table)
	if err != nil {
		return fmt.Errorf("--table: %w", err)
	}
	t, err := openPoolOnly(ctx, c.PGURL)
	if err != nil {
		return err
	}
	defer t.Close()
	rows, err := t.Query(ctx, `SELECT d.event_id, d.reason, COALESCE(d.commit_lsn::text, ''), d.dead_lettered_at, d.retried_at,
			e.aggregate_type::text, e.aggregate_id::text, e.event_type::text
		FROM `+pgx.Identifier{table.Schema, checkpoint.DeadLettersTable}.Sanitize()+` d
		LEFT JOIN `+table.Quoted()+` e ON e.id::text = d.event_id
		WHERE $1 OR d.retried_at IS NULL ORDER BY d.dead_lettered_at`, c.All)
	if err != nil {
		return fmt.Errorf("read dead letters: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (deadLetter, error) {
		var d deadLetter
		err := r.Scan(&d.EventID, &d.Reason, &d.CommitLSN, &d.DeadLettered, &d.Retried, &d.AggregateType, &d.AggregateID, &d.EventType)
		return d, err
	})
	if err != nil {
		return fmt.Errorf("read dead letters: %w", err)
	}
	if c.JSON {
		return printJSON(list)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "EVENT ID\tEVENT TYPE\tAGGREGATE\tDEAD-LETTERED\tRETRIED\tREASON")
	for _, d := range list {
		retried := "-"
		if d.Retried != nil {
			retried = d.Retried.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s/%s\t%s\t%s\t%s\n", shownID(d.EventID), deref(d.EventType), deref(d.AggregateType), deref(d.AggregateID),
			d.DeadLettered.UTC().Format(time.RFC3339), retried, d.Reason)
	}
	w.Flush()
	if len(list) == 0 {
		fmt.Println("no dead letters")
	}
	return nil
}

// shownID quotes an id that whitespace or control characters would make
// ambiguous in a table.
func shownID(id string) string {
	if contract.CheckID(id) != "" {
		return strconv.Quote(id)
	}
	return id
}

func deref(s *string) string {
	if s == nil {
		return "(row gone)"
	}
	return *s
}

type dlqRetryCmd struct {
	pgFlags   `embed:""`
	natsFlags `embed:""`
	nameFlags `embed:""`
	// formatFlags: a retried event is published in the relay's form.
	formatFlags `embed:""`
	ID          []string `name:"id" help:"Event id to retry (repeatable)."`
	All         bool     `name:"all" help:"Retry every dead letter not retried yet."`
}

func (c *dlqRetryCmd) Run(ctx context.Context, log zerolog.Logger) error {
	n, err := c.nameFlags.parse()
	if err != nil {
		return err
	}
	if n.format, err = c.formatFlags.parse(c.PGURL, n.table); err != nil {
		return err
	}
	if len(c.ID) == 0 && !c.All {
		return errors.New("name events with --id, or pass --all")
	}
	t, err := openTools(ctx, c.PGURL, c.natsFlags, n)
	if err != nil {
		return err
	}
	defer t.close()
	ids := c.ID
	if c.All {
		rows, err := t.pool.Query(ctx, `SELECT event_id FROM `+pgx.Identifier{n.table.Schema, checkpoint.DeadLettersTable}.Sanitize()+` WHERE retried_at IS NULL`)
		if err != nil {
			return fmt.Errorf("read dead letters: %w", err)
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
	}
	return t.retry(ctx, n, ids, log)
}

// retry publishes the rows with the given ids to their own subjects and
// marks them retried; rows that would be dead letters again are reported.
func (t *tools) retry(ctx context.Context, n names, ids []string, log zerolog.Logger) error {
	var problems []string
	found, rejected := map[string]bool{}, map[string]bool{}
	o, _, err := t.publishIDs(ctx, n, ids, contract.ReplayRetry, log, func(o *relay.OneShot, ev *decode.Event) bool {
		found[ev.ID] = true
		if reason := o.Rejects(ev); reason != "" {
			rejected[ev.ID] = true
			problems = append(problems, fmt.Sprintf("%s still cannot be published: %s", ev.ID, reason))
			return false
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		switch reason, again := o.DeadLettered(id); {
		case !found[id]:
			problems = append(problems, fmt.Sprintf("%s: no such row in %s (deleted, or an event without a usable id)", id, n.table))
		case again:
			problems = append(problems, fmt.Sprintf("%s was dead-lettered again: %s", id, reason))
		case !rejected[id]:
			if _, err := t.pool.Exec(ctx, `UPDATE `+pgx.Identifier{n.table.Schema, checkpoint.DeadLettersTable}.Sanitize()+`
				SET retried_at = now() WHERE event_id = $1`, id); err != nil {
				return fmt.Errorf("mark %s retried: %w", id, err)
			}
			fmt.Printf("%s published\n", id)
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}
