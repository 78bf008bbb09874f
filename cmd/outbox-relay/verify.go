package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/verify"
)

type verifyCmd struct {
	pgFlags   `embed:""`
	natsFlags `embed:""`
	nameFlags `embed:""`
	Since     time.Time `name:"since" format:"2006-01-02T15:04:05Z07:00" help:"Only rows created at or after this time (RFC 3339)."`
	Until     time.Time `name:"until" format:"2006-01-02T15:04:05Z07:00" help:"Only rows created before this time (RFC 3339)."`
	Republish bool      `name:"republish" help:"Publish the committed rows the stream lacks (same id, so consumers can dedup), then check again."`
	JSON      bool      `name:"json" help:"Print the report as JSON."`
}

// errProblems makes verify exit non-zero.
var errProblems = errors.New("the stream does not match the table")

func (c *verifyCmd) Run(ctx context.Context, log zerolog.Logger) error {
	n, err := c.nameFlags.parse()
	if err != nil {
		return err
	}
	tools, err := openTools(ctx, c.PGURL, c.natsFlags, n)
	if err != nil {
		return err
	}
	defer tools.close()
	opts := verify.Options{Table: n.table, Subjects: []string{n.subject.Filter(), n.deadLetter}, Since: c.Since, Until: c.Until}
	rep, err := verify.Run(ctx, tools.pool, tools.stream, opts)
	if err != nil {
		return err
	}
	if c.Republish && len(rep.Missing) > 0 {
		c.print(rep, "before republishing")
		if err := tools.republish(ctx, n, rep.Missing, log); err != nil {
			return err
		}
		if rep, err = verify.Run(ctx, tools.pool, tools.stream, opts); err != nil {
			return err
		}
		if len(rep.Missing) > 0 {
			c.print(rep, "after republishing")
			return fmt.Errorf("%w: %d rows are still missing after republishing; JetStream drops a message whose Nats-Msg-Id it saw within the stream's duplicate window, even if that message was deleted since: run again once the window (%s) has passed",
				errProblems, len(rep.Missing), tools.stream.CachedInfo().Config.Duplicates)
		}
	}
	c.print(rep, "")
	if !rep.OK() {
		return errProblems
	}
	return nil
}

func (c *verifyCmd) print(rep verify.Report, note string) {
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	printReport(os.Stdout, rep, note)
}

func printReport(w io.Writer, rep verify.Report, note string) {
	if note != "" {
		note = " (" + note + ")"
	}
	fmt.Fprintf(w, "%d committed rows, %d messages (%d dead letters)%s\n", rep.Rows, rep.Messages, rep.DeadLetters, note)
	list := func(what string, ids []string) {
		fmt.Fprintf(w, "  %-17s %d", what, len(ids))
		for i, id := range ids {
			if i == 10 {
				fmt.Fprintf(w, " …")
				break
			}
			fmt.Fprintf(w, " %s", id)
		}
		fmt.Fprintln(w)
	}
	list("missing:", rep.Missing)
	list("extra:", rep.Extra)
	dups := make([]string, 0, len(rep.Duplicates))
	for id, n := range rep.Duplicates {
		dups = append(dups, fmt.Sprintf("%s×%d", id, n))
	}
	list("duplicated:", dups)
	var order []string
	for _, v := range rep.OrderViolations {
		order = append(order, v.String())
	}
	list("out of order:", order)
	if rep.OK() {
		fmt.Fprintln(w, "OK: every committed row is in the stream once, in commit order per aggregate")
	}
}

// tools are the connections an operator command needs.
type tools struct {
	pool   *pgxpool.Pool
	nc     *nats.Conn
	stream jetstream.Stream
	store  *checkpoint.Store
	table  decode.Table
}

func openPoolOnly(ctx context.Context, pgURL string) (*pgxpool.Pool, error) {
	poolCfg, _, err := replication.ParseConnString(pgURL)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, poolCfg)
}

func openTools(ctx context.Context, pgURL string, nf natsFlags, n names) (*tools, error) {
	poolCfg, _, err := replication.ParseConnString(pgURL)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, err
	}
	t := &tools{pool: pool, table: n.table, store: checkpoint.NewStore(pool, n.table.Schema, n.slot)}
	if t.nc, err = nats.Connect(nf.NATSURL, natsAuth(nf)...); err != nil {
		t.close()
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactNATS(nf.NATSURL), err)
	}
	js, err := jetstream.New(t.nc)
	if err != nil {
		t.close()
		return nil, err
	}
	if t.stream, err = js.Stream(ctx, n.stream); err != nil {
		t.close()
		return nil, fmt.Errorf("open stream %q: %w", n.stream, err)
	}
	return t, nil
}

func (t *tools) close() {
	if t.nc != nil {
		t.nc.Close()
	}
	t.pool.Close()
}

// republish publishes the rows with the given ids from the table.
func (t *tools) republish(ctx context.Context, n names, ids []string, log zerolog.Logger) error {
	_, count, err := t.publishIDs(ctx, n, ids, log, nil)
	if err != nil {
		return err
	}
	log.Info().Int("published", count).Msg("republished the missing rows")
	return nil
}

// publishIDs publishes the table's rows with the given ids, in commit
// order, and waits for their PubAcks. admit, when set, sees every row
// found, with the publisher, and may hold it back. It returns the
// publisher (to ask what was dead-lettered) and how many rows were found.
func (t *tools) publishIDs(ctx context.Context, n names, ids []string, log zerolog.Logger, admit func(*oneShot, *decode.Event) bool) (*oneShot, int, error) {
	src, err := newRowSource(ctx, t.pool, n.table)
	if err != nil {
		return nil, 0, err
	}
	o, err := newOneShot(ctx, t.nc, t.stream, n, t.store, log)
	if err != nil {
		return nil, 0, err
	}
	count, err := src.each(ctx, t.pool, "id::text = ANY($1)", []any{ids}, func(ev *decode.Event) error {
		if admit != nil && !admit(o, ev) {
			return nil
		}
		return o.offer(ctx, ev)
	})
	if ferr := o.finish(ctx); err == nil {
		err = ferr
	}
	return o, count, err
}
