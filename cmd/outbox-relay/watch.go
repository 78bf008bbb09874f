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

	"github.com/outbox-relay/outbox-relay/internal/doctor"
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
	var prev watchSample
	for {
		s := c.sample(ctx, pool, nc, n)
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

// watchSample is one look at the slot and the stream.
type watchSample struct {
	at  time.Time
	r   inspect.Report
	err error // Postgres could not be read
}

func (c *statusCmd) sample(ctx context.Context, pool *pgxpool.Pool, nc *nats.Conn, n names) watchSample {
	sctx, cancel := context.WithTimeout(ctx, max(c.Interval, 2*time.Second))
	defer cancel()
	r, err := inspect.Collect(sctx, pool, nc, c.options(n))
	return watchSample{at: time.Now(), r: r, err: err}
}

// rate is the stream's messages per second between two samples; ok is
// false when it cannot be told.
func rate(s, prev watchSample) (perSec float64, ok bool) {
	if prev.at.IsZero() || s.r.StreamLastSeq < prev.r.StreamLastSeq || s.r.StreamError != "" || prev.r.StreamError != "" {
		return 0, false
	}
	return float64(s.r.StreamLastSeq-prev.r.StreamLastSeq) / s.at.Sub(prev.at).Seconds(), true
}

// watchFields are a sample's figures as name, value pairs, in display order.
func watchFields(s, prev watchSample) [][2]string {
	r := s.r
	var f [][2]string
	add := func(k, format string, args ...any) { f = append(f, [2]string{k, fmt.Sprintf(format, args...)}) }
	if s.err != nil {
		add("postgres", "%v", s.err)
	}
	switch {
	case s.err != nil:
	case r.Poll != nil:
		add("pending", "%s", r.Poll.Line())
	case !r.Exists:
		add("slot", "missing")
	case r.Active:
		add("slot", "active pid %d, wal_status %s", r.ActivePID, r.WALStatus)
	default:
		add("slot", "INACTIVE, wal_status %s", r.WALStatus)
	}
	if s.err == nil && r.Exists {
		add("lag", "%s (%d bytes)", doctor.HumanBytes(r.LagBytes), r.LagBytes)
		if r.FlushLagSeconds != nil {
			add("flush lag", "%.3fs", *r.FlushLagSeconds)
		} else {
			add("flush lag", "-")
		}
	}
	if per, ok := rate(s, prev); ok {
		add("rate", "%.1f msg/s", per)
	} else {
		add("rate", "-")
	}
	switch {
	case r.StreamError != "":
		add("stream", "%s", r.StreamError)
	case r.LastEvent != nil:
		add("last event", "%s ago (%s, seq %d)", s.at.Sub(r.LastEvent.Time).Round(100*time.Millisecond), r.LastEvent.ID, r.LastEvent.Seq)
	default:
		add("last event", "none")
	}
	if r.DeadLettersPending != nil {
		add("dead letters", "%d not retried", *r.DeadLettersPending)
	}
	if len(r.Problems) > 0 {
		add("problems", "%s", strings.Join(r.Problems, "; "))
	}
	return f
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

func (v *watchView) draw(s, prev watchSample, every time.Duration) {
	fields := watchFields(s, prev)
	if !v.tty {
		parts := []string{s.at.UTC().Format(time.RFC3339)}
		for _, kv := range fields {
			parts = append(parts, strings.ReplaceAll(kv[0], " ", "_")+"="+quoteIfSpace(kv[1]))
		}
		fmt.Fprintln(v.w, strings.Join(parts, " "))
		return
	}
	var b strings.Builder
	b.WriteString("\x1b[H") // home; each line clears its rest, then below
	fmt.Fprintf(&b, "outbox-relay status: slot %s, stream %s  %s (every %s, Ctrl-C to quit)\x1b[K\n\x1b[K\n",
		s.r.Slot, s.r.Stream, s.at.Format("15:04:05"), every)
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
