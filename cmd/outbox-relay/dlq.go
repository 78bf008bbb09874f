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

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/relay"
)

type dlqCmd struct {
	List  dlqListCmd  `cmd:"" help:"List the events the relay sent to the dead-letter subject, with the reason."`
	Retry dlqRetryCmd `cmd:"" help:"Publish dead-lettered events again from the outbox table (after fixing their rows or the limits)."`
}

type dlqListCmd struct {
	pgFlags `embed:""`
	Table   []string `name:"table" env:"OUTBOX_TABLE" default:"${table}" sep:"," help:"Outbox table, schema-qualified; the relay's tables, in its order, when it reads several (its dead letters are then keyed schema.table/id)."`
	All     bool     `name:"all" help:"Include events already retried."`
	JSON    bool     `name:"json" help:"Print JSON."`
}

func (c *dlqListCmd) Run(ctx context.Context, log zerolog.Logger) error {
	tables, err := contract.ParseTables(c.Table...)
	if err != nil {
		return fmt.Errorf("--table: %w", err)
	}
	t, err := openPoolOnly(ctx, c.PGURL)
	if err != nil {
		return err
	}
	defer t.Close()
	list, err := checkpoint.ListDeadLetters(ctx, t, tables, c.All)
	if err != nil {
		return err
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
	if n.format, err = c.formatFlags.parse(c.PGURL, n.table, n.more...); err != nil {
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
		if ids, err = t.store.DeadLetterIDsNotRetried(ctx); err != nil {
			return err
		}
	}
	return t.retry(ctx, n, ids, log)
}

// retry publishes the rows with the given ids to their own subjects and
// marks them retried (relay.RetryDeadLetters); rows that would be dead
// letters again are reported.
func (t *tools) retry(ctx context.Context, n names, ids []string, log zerolog.Logger) error {
	rep, err := relay.RetryDeadLetters(ctx, t.deps(), t.config(n), ids, log)
	for _, id := range rep.Published {
		fmt.Printf("%s published\n", id)
	}
	if err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return errors.New(strings.Join(rep.Problems, "\n"))
	}
	return nil
}
