package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/relay"
)

type replayCmd struct {
	pgFlags   `embed:""`
	natsFlags `embed:""`
	nameFlags `embed:""`
	// formatFlags: copies are published in the relay's form.
	formatFlags     `embed:""`
	Since           time.Time     `name:"since" format:"2006-01-02T15:04:05Z07:00" help:"Replay rows created at or after this time (RFC 3339); required."`
	Until           time.Time     `name:"until" format:"2006-01-02T15:04:05Z07:00" help:"Only rows created before this time (RFC 3339)."`
	AggregateType   []string      `name:"aggregate-type" help:"Only rows of this aggregate_type (repeatable)."`
	AggregateID     []string      `name:"aggregate-id" help:"Only rows of this aggregate_id (repeatable)."`
	ToStream        string        `name:"to-stream" help:"Publish the copies into this stream, on P.<subject> (P its subjects' prefix P.>, or --subject-prefix)."`
	SubjectPrefix   string        `name:"subject-prefix" help:"Publish the copies on P.<subject>, into the stream storing them."`
	IntoRelayStream bool          `name:"into-relay-stream" help:"Publish the copies into the relay's own stream, on its subjects: its consumers see them (marked Outbox-Replay: replay)."`
	RunID           string        `name:"run-id" help:"Run id in every copy's Nats-Msg-Id (replay/<run id>/<event id>); rerun an interrupted replay with the id it printed to go on where it stopped."`
	DryRun          bool          `name:"dry-run" help:"Count the rows in range; publish nothing."`
	Progress        time.Duration `name:"progress" default:"10s" help:"How often to log progress (on a terminal a bar shows it instead; negative: never)."`
}

func (c *replayCmd) Run(ctx context.Context, log zerolog.Logger) error {
	n, err := c.nameFlags.parse()
	if err != nil {
		return err
	}
	if n.format, err = c.formatFlags.parse(c.PGURL, n.table, n.more...); err != nil {
		return err
	}
	o := relay.ReplayOptions{Since: c.Since, Until: c.Until, AggregateTypes: c.AggregateType, AggregateIDs: c.AggregateID,
		ToStream: c.ToStream, SubjectPrefix: c.SubjectPrefix, IntoRelayStream: c.IntoRelayStream, RunID: c.RunID, Progress: c.Progress, Show: progressTo(log)}
	if err := o.Check(n.stream); err != nil {
		return err
	}
	if c.DryRun {
		return c.count(ctx, n, o)
	}
	if o.RunID == "" {
		o.RunID = relay.NewRunID(time.Now())
	}
	fmt.Printf("replay run %s (rerun with --run-id %s to go on after an interruption)\n", o.RunID, o.RunID)
	t, err := openTools(ctx, c.PGURL, c.natsFlags, n)
	if err != nil {
		return err
	}
	defer t.close()
	rep, err := relay.Replay(ctx, t.deps(), t.config(n), o, log)
	if err != nil {
		return err
	}
	fmt.Printf("replayed %d of %d rows into stream %s on %s (%d stored by the run before, %d not publishable as they are)\n",
		rep.Published, rep.Rows, rep.Stream, rep.Subjects, rep.Resumed, rep.Skipped)
	return nil
}

// count is --dry-run: the rows in range, from Postgres alone.
func (c *replayCmd) count(ctx context.Context, n names, o relay.ReplayOptions) error {
	pool, err := pingPool(ctx, c.PGURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := relay.CountReplay(ctx, pool, n.relayConfig(), o)
	if err != nil {
		return err
	}
	fmt.Printf("%d rows to replay (dry run: nothing published)\n", rows)
	return nil
}
