package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mattn/go-isatty"
	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
)

// watch samples the slot and the stream every interval until ctx ends
// (Ctrl-C): a view redrawn in place on a terminal, one line per interval
// otherwise. NATS or Postgres going away is shown, not fatal.
func (c *statusCmd) watch(ctx context.Context, pool *pgxpool.Pool, n names) error {
	nc, err := nats.Connect(c.NATSURL, append(c.natsFlags.options().Auth(), nats.Name("outbox-relay status --watch"),
		nats.Timeout(2*time.Second), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second))...)
	if err != nil {
		return withExit(exitUsage, err)
	}
	defer nc.Close()
	v := &watchView{w: os.Stdout, tty: isatty.IsTerminal(os.Stdout.Fd())}
	v.start()
	defer v.stop()
	tick := time.NewTicker(c.Interval)
	defer tick.Stop()
	var prev inspect.Sample
	for {
		s := inspect.TakeSample(ctx, pool, nc, c.options(n), max(c.Interval, 2*time.Second))
		if ctx.Err() != nil {
			return nil
		}
		v.draw(s, prev, c.Interval)
		prev = s
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watchView draws samples: in place with ANSI codes on a terminal, as one
// line each otherwise (a pipe, a log file).
type watchView struct {
	w   io.Writer
	tty bool
}

func (v *watchView) start() {
	if v.tty {
		fmt.Fprint(v.w, "\x1b[?25l\x1b[2J") // hide the cursor, clear the screen
	}
}

// stop leaves the last view on screen and gives the cursor back.
func (v *watchView) stop() {
	if v.tty {
		fmt.Fprint(v.w, "\x1b[?25h\n")
	}
}

func (v *watchView) draw(s, prev inspect.Sample, every time.Duration) {
	fields := s.Fields(prev)
	if !v.tty {
		parts := []string{s.At.UTC().Format(time.RFC3339)}
		for _, kv := range fields {
			parts = append(parts, strings.ReplaceAll(kv[0], " ", "_")+"="+quoteIfSpace(kv[1]))
		}
		fmt.Fprintln(v.w, strings.Join(parts, " "))
		return
	}
	var b strings.Builder
	b.WriteString("\x1b[H") // home; each line clears its rest, then below
	fmt.Fprintf(&b, "outbox-relay status: slot %s, stream %s  %s (every %s, Ctrl-C to quit)\x1b[K\n\x1b[K\n",
		s.Report.Slot, s.Report.Stream, s.At.Format("15:04:05"), every)
	for _, kv := range fields {
		fmt.Fprintf(&b, "%-14s %s\x1b[K\n", kv[0], kv[1])
	}
	b.WriteString("\x1b[J")
	fmt.Fprint(v.w, b.String())
}

func quoteIfSpace(s string) string {
	if strings.ContainsAny(s, " \t\"") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
