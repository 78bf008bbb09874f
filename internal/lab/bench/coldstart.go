package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/replication"
)

// coldCase is one cold-start drain (C1): a backlog written while no relay
// runs, then the relay started as a fresh process, as a user would after
// a deploy or an outage.
type coldCase struct {
	name    string // the scenario's name
	label   string
	events  int
	perTxn  int
	payload int // target size of each JSON payload, in bytes of text
}

// coldCases are the cold-start drains of a run: n events of ~250-byte
// payloads in one-row and in ten-row transactions, n one-row events of
// ~4 KiB, and a tenth as many of ~64 KiB (the same order of bytes as the
// 4 KiB run, not sixteen times more).
func coldCases(n int) []coldCase {
	return []coldCase{
		{name: "c1_1row", label: "1-row transactions, ~250 B", events: n, perTxn: 1, payload: 250},
		{name: "c1_10row", label: "10-row transactions, ~250 B", events: n, perTxn: 10, payload: 250},
		{name: "c1_4k", label: "1-row transactions, ~4 KiB", events: n, perTxn: 1, payload: 4 << 10},
		{name: "c1_64k", label: "1-row transactions, ~64 KiB", events: max(n/10, 1), perTxn: 1, payload: 64 << 10},
	}
}

// coldResult is one cold-start drain, side by side with pg_recvlogical and
// JetStream's limit for messages of its size. Every duration of the relay
// counts from the moment the benchmark started its process.
type coldResult struct {
	coldCase
	payloadBytes int // average payload size as written, in bytes of JSON text

	recv                      time.Duration // pg_recvlogical, from its process start to its exit
	recvCPU                   time.Duration // pg_recvlogical's own
	recvWalsnd                time.Duration
	recvWalsndKnown           bool
	limit                     time.Duration // JetStream storing as many messages of the same size (L2)
	firstStored, lastStored   time.Duration // the first and last event stored (≈ their PubAcks)
	confirmed                 time.Duration // the slot confirmed past the backlog
	natsUp, takenUp, streamed time.Duration // from the relay's log; 0 when not found
	relayPID                  int
	drain                     drainResult // CPU: the relay's from its start, nats-server's and the walsender's meanwhile
}

func (r coldResult) bytes() float64 { return float64(r.events) * float64(r.payloadBytes) }

// coldStarts runs the cold-start drains (C1).
func (b *bench) coldStarts(ctx context.Context) error {
	n := min(b.cfg.Cold, b.cfg.Events)
	if n <= 0 {
		return nil
	}
	for _, c := range coldCases(n) {
		r, err := b.coldStart(ctx, c)
		if err != nil {
			return fmt.Errorf("cold start, %s: %w", c.label, err)
		}
		b.report.colds = append(b.report.colds, r)
	}
	return nil
}

// coldStart writes the case's backlog while no relay runs (the relay's
// slot exists: one short run created it, as a first start does), then
// measures, in this order: pg_recvlogical on a second slot created next
// to it, JetStream storing as many messages of the same size, and a fresh
// relay process started with `run` at its defaults.
func (b *bench) coldStart(ctx context.Context, c coldCase) (coldResult, error) {
	r := coldResult{coldCase: c}
	sc, err := b.scenario(ctx, c.name)
	if err != nil {
		return r, err
	}
	recvSlot := "recv_" + sc.name
	end, err := b.backlogSized(ctx, sc, c, recvSlot)
	if err != nil {
		return r, err
	}
	r.payloadBytes = sc.payloadSize(ctx, b.pool)

	b.progress("C1: pg_recvlogical over %d events in %s, from its process start", c.events, c.label)
	watch := watchWalsender(ctx, b.pool, recvSlot)
	r.recv, r.recvCPU, err = pgRecvlogical(ctx, b.pgBinDir, b.pgURL, recvSlot, sc.publication, end)
	r.recvWalsnd, r.recvWalsndKnown = watch()
	_ = replication.DropSlot(context.WithoutCancel(ctx), b.pool, recvSlot)
	if err != nil {
		return r, err
	}
	b.progress("  %d events in %s, %s events/s", c.events, r.recv.Round(time.Millisecond), thousands(float64(c.events)/r.recv.Seconds()))

	b.progress("C1: JetStream storing %d messages of ~%d bytes (L2 for this size)", c.events, r.payloadBytes)
	if r.limit, err = jetStreamLimit(ctx, b.natsURL, c.events, r.payloadBytes); err != nil {
		return r, err
	}

	b.progress("C1: a fresh relay process draining %d events in %s", c.events, c.label)
	if err := b.coldDrain(ctx, sc, end, &r); err != nil {
		return r, err
	}
	b.progress("  relay pid %d: first event stored %s after its start, last %s (%s events/s), slot confirmed %s",
		r.relayPID, ms(r.firstStored), ms(r.lastStored), thousands(float64(c.events)/r.lastStored.Seconds()), ms(r.confirmed))
	return r, nil
}

// backlogSized is backlog with payloads of the case's size.
func (b *bench) backlogSized(ctx context.Context, sc scenario, c coldCase, readers ...string) (pglogrepl.LSN, error) {
	return b.backlogWith(ctx, sc, c.events, c.perTxn, func() (pglogrepl.LSN, error) {
		return sc.fillSized(ctx, b.pool, c.events, c.perTxn, c.payload)
	}, readers...)
}

// coldDrain starts the relay and waits until every event is stored and
// the slot confirmed past end, then reads when the first and the last
// event were stored (JetStream's timestamps, on this machine's clock:
// each is stored just before its PubAck leaves the server).
func (b *bench) coldDrain(ctx context.Context, sc scenario, end pglogrepl.LSN, r *coldResult) error {
	stream, err := b.js.Stream(ctx, sc.stream)
	if err != nil {
		return err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	before := info.State.LastSeq
	natsBefore, natsKnown := b.natsStat()
	logFile := filepath.Join(b.dir, "relay-"+sc.name+".log")
	started := time.Now()
	relay, err := startChild(b.cfg.Self, b.relayArgs(sc), logFile)
	if err != nil {
		return err
	}
	r.relayPID = relay.pid()
	dctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	walsnd := 0
	var confirmed time.Time
	var stored uint64
	progress := newCurve(started)
	for {
		if walsnd == 0 {
			walsnd = slotPID(ctx, b.pool, sc.slot)
		}
		if i, err := stream.Info(dctx); err == nil {
			stored = i.State.LastSeq - before
			progress.add(stored)
		}
		if confirmed.IsZero() {
			if slot, err := replication.LookupSlot(dctx, b.pool, sc.slot); err == nil && slot.ConfirmedFlush >= end {
				confirmed = time.Now()
			}
		}
		if stored >= uint64(r.events) && !confirmed.IsZero() {
			break
		}
		select {
		case <-dctx.Done():
			relay.stop()
			log, _ := os.ReadFile(logFile)
			return fmt.Errorf("not drained: %d of %d events stored, slot confirmed past the backlog: %v: %w\n%s", stored, r.events, !confirmed.IsZero(), dctx.Err(), log)
		case <-time.After(10 * time.Millisecond):
		}
	}
	r.confirmed = confirmed.Sub(started)
	if st, ok := readProc(relay.pid()); ok {
		r.drain.relayCPU, r.drain.relayRSS = st.cpu, st.peakRSS
	}
	if natsAfter, ok := b.natsStat(); ok && natsKnown {
		r.drain.natsCPU, r.drain.natsKnown = natsAfter.cpu-natsBefore.cpu, true
	}
	if st, ok := readPostgresProc(walsnd); ok {
		r.drain.walsndCPU, r.drain.walsndKnown = st.cpu, true
	}
	r.drain.events = r.events
	r.drain.curve = progress.done(stored)
	first, err := storedAt(ctx, stream, before+1)
	if err != nil {
		return err
	}
	last, err := storedAt(ctx, stream, before+uint64(r.events))
	if err != nil {
		return err
	}
	r.firstStored, r.lastStored = first.Sub(started), last.Sub(started)
	if err := relay.stop(); err != nil {
		return fmt.Errorf("relay exit: %w", err)
	}
	r.natsUp, r.takenUp, r.streamed = startupPhases(logFile, started)
	if line := startupLine(logFile); line != "" {
		b.progress("  the relay's start-up, as it logged it: %s", line)
	}
	rows, err := b.verify(ctx, sc, stream)
	b.coldChecked += rows
	return err
}

// storedAt returns when the stream stored the message at seq.
func storedAt(ctx context.Context, stream jetstream.Stream, seq uint64) (time.Time, error) {
	m, err := stream.GetMsg(ctx, seq)
	if err != nil {
		return time.Time{}, fmt.Errorf("read message %d: %w", seq, err)
	}
	return m.Time, nil
}

// startupPhases reads from the relay's JSON log when it had connected to
// NATS (its first line), taken up its slot, and started streaming, as
// offsets from its process start; 0 for a line not found.
func startupPhases(logFile string, started time.Time) (natsUp, takenUp, streaming time.Duration) {
	f, err := os.Open(logFile)
	if err != nil {
		return 0, 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Time    time.Time `json:"time"`
			Message string    `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Time.IsZero() {
			continue
		}
		at := line.Time.Sub(started)
		switch line.Message {
		case "starting outbox relay":
			natsUp = at
		case "taking up the replication slot":
			takenUp = at
		case "streaming from the slot's confirmed position":
			if streaming == 0 {
				streaming = at
			}
		}
	}
	return natsUp, takenUp, streaming
}

// startupLine returns the relay's "start-up took" log line (its phases,
// timed from its main), or "" when it logged none.
func startupLine(logFile string) string {
	data, err := os.ReadFile(logFile)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, `"message":"start-up took"`) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
