package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/verify"
)

type verifyCmd struct {
	pgFlags   `embed:""`
	natsFlags `embed:""`
	nameFlags `embed:""`
	// formatFlags: --republish publishes in the relay's form.
	formatFlags `embed:""`
	Since       time.Time `name:"since" format:"2006-01-02T15:04:05Z07:00" help:"Only rows created at or after this time (RFC 3339)."`
	Until       time.Time `name:"until" format:"2006-01-02T15:04:05Z07:00" help:"Only rows created before this time (RFC 3339)."`
	Republish   bool      `name:"republish" help:"Publish the committed rows the stream lacks (same id, so consumers can dedup), then check again."`
	JSON        bool      `name:"json" help:"Print the report as JSON."`
}

// errProblems makes verify exit non-zero.
var errProblems = errors.New("the stream does not match the table")

func (c *verifyCmd) Run(ctx context.Context, log zerolog.Logger) error {
	n, err := c.nameFlags.parse()
	if err != nil {
		return err
	}
	if n.format, err = c.formatFlags.parse(c.PGURL, n.table, n.more...); err != nil {
		return err
	}
	tools, err := openTools(ctx, c.PGURL, c.natsFlags, n)
	if err != nil {
		return err
	}
	defer tools.close()
	opts := verify.Options{Table: n.table, MoreTables: n.more, Since: c.Since, Until: c.Until, Progress: progressTo(log)}
	reader := tools.reader(ctx, n, log) // the tables' messages only, in a shared stream
	rep, err := verify.Run(ctx, tools.pool, reader, opts)
	if err != nil {
		return err
	}
	if c.Republish && len(rep.Missing) > 0 {
		c.print(rep, "before republishing")
		if err := tools.republish(ctx, n, rep.Missing, log); err != nil {
			return err
		}
		if rep, err = verify.Run(ctx, tools.pool, reader, opts); err != nil {
			return err
		}
		if len(rep.Missing) > 0 {
			c.print(rep, "after republishing")
			return fmt.Errorf("%w: %d rows are still missing after republishing; JetStream drops a message whose Nats-Msg-Id it saw within the stream's duplicate window, even if that message was deleted since: run again once the window (%s) has passed",
				errProblems, len(rep.Missing), tools.stream.DuplicateWindow())
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
		_ = printJSON(rep)
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
	var unparsed []string
	for _, u := range rep.Unparsed {
		unparsed = append(unparsed, u.String())
	}
	list("unparsed:", unparsed)
	if rep.OK() {
		fmt.Fprintln(w, "OK: every committed row is in the stream once, in commit order per aggregate")
	}
}
