package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// What the message shape costs (L2S): the same events stored by JetStream
// from one connection, like L2, with fewer and fewer of the relay's
// headers, to see what each header set costs nats-server and the client.

// maxShapeEvents is the most messages of a pass of L2S.
const maxShapeEvents = 50000

// msgShape is a set of the relay's headers that a message keeps.
type msgShape struct {
	key, label string
	// keep lists the headers kept; nil keeps every one.
	keep []string
}

// sourceHeaders are the Outbox-Source-* headers a relay of one table
// stamps on every message.
var sourceHeaders = []string{contract.HeaderSourceSystem, contract.HeaderSourceTimeline, contract.HeaderSourceSlot,
	contract.HeaderSourceOrigin, contract.HeaderSourceDatabase, contract.HeaderSourceTable}

// resumeHeaders are what the relay reads back from the stream to resume
// (sink/jetstream ParseStored: the event's id, its position and its
// source; checkpoint's holdings key on the source's table).
var resumeHeaders = append([]string{contract.HeaderMsgID, contract.HeaderCommitLSN, contract.HeaderTxnIndex}, sourceHeaders...)

// consumerHeaders are what the consumer package reads besides the id
// (consumer/message.go): the row's values, and which of them are
// percent-encoded (only present when one is).
var consumerHeaders = []string{contract.HeaderAggregateType, contract.HeaderAggregateID, contract.HeaderEventType,
	contract.HeaderTable, contract.HeaderPercentEncoded}

// msgShapes are the shapes measured, the relay's own first.
func msgShapes() []msgShape {
	return []msgShape{
		{key: "full", label: "the relay's headers, as it sends them"},
		{key: "needed", label: "what resuming and the consumer read", keep: append(slices.Clone(resumeHeaders), consumerHeaders...)},
		{key: "resume", label: "what resuming reads (id, position, source)", keep: resumeHeaders},
		{key: "id", label: "Nats-Msg-Id only", keep: []string{contract.HeaderMsgID}},
	}
}

// shapeSource is the source a relay of one table stamps, with values of a
// real cluster's length.
var shapeSource = sink.Source{System: "7449917812345678901", Timeline: 1, Slot: "outbox_relay", Origin: 0x1A2B3C40,
	Database: "app", Table: "public.outbox_events"}

// msg returns the relay's message for sample event i, stamped with
// shapeSource, on subject, with the headers s keeps.
func (s msgShape) msg(i, payloadSize int, subject string) *nats.Msg {
	ev := sampleEvent(i, payloadSize)
	m := jssink.EventMsg(&ev, subject)
	jssink.SetSourceHeaders(m.Header, shapeSource)
	if s.keep == nil {
		return m
	}
	for name := range m.Header {
		// nats.go's header names are case-sensitive, as the relay sets them.
		if !slices.Contains(s.keep, name) {
			delete(m.Header, name)
		}
	}
	return m
}

// headerBytes is the size of the header block nats.go writes for m.
func headerBytes(m *nats.Msg) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// shapeResult is one shape's measurement, summed over its passes.
type shapeResult struct {
	msgShape
	headers   int // header names kept
	hdrBytes  int // header block bytes per message
	events    int
	took      time.Duration
	clientCPU time.Duration
	natsCPU   time.Duration
	natsKnown bool
}

// shapes measures L2S: n messages of payloadSize in each shape, in two
// passes in mirrored order (full, needed, resume, id, then back), so that
// a drift of the machine's load during the measure weighs on every shape
// alike.
func (b *bench) shapes(ctx context.Context, n, payloadSize int) error {
	shapes := msgShapes()
	results := make([]shapeResult, len(shapes))
	order := make([]int, 0, 2*len(shapes))
	for i := range shapes {
		order = append(order, i)
	}
	for i := len(shapes) - 1; i >= 0; i-- {
		order = append(order, i)
	}
	for _, i := range order {
		s := shapes[i]
		r := &results[i]
		r.msgShape, r.natsKnown = s, b.nats != nil
		run, err := storeMessages(ctx, b.natsURL, n, func(i int, subject string) *nats.Msg { return s.msg(i, payloadSize, subject) }, b.natsStat)
		if err != nil {
			return fmt.Errorf("L2S, %s: %w", s.label, err)
		}
		r.headers, r.hdrBytes = len(run.first.Header), headerBytes(run.first)
		r.events += n
		r.took += run.took
		r.clientCPU += run.clientCPU
		r.natsCPU += run.natsCPU
		r.natsKnown = r.natsKnown && run.natsKnown
	}
	for _, r := range results {
		writeProgress(b.cfg.Progress, "  L2S %s: %d headers, %d bytes; %s events/s; client %.1f µs/event, nats-server %.1f µs/event",
			r.key, r.headers, r.hdrBytes, thousands(float64(r.events)/r.took.Seconds()), perEvent(r.clientCPU, r.events), perEvent(r.natsCPU, r.events))
	}
	b.report.shapes = results
	return nil
}

// storeRun is one timed publishing of messages into a fresh stream.
type storeRun struct {
	took      time.Duration
	clientCPU time.Duration // this process's
	natsCPU   time.Duration
	natsKnown bool
	first     *nats.Msg
}

// selfCPU is this process's CPU time (user + system), to the microsecond.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// shapeFigures puts a shape's figures: l2s.<shape>.…
func shapeFigures(put func(string, float64), r shapeResult) {
	k := "l2s." + r.key + "."
	put(k+"headers", float64(r.headers))
	put(k+"header_bytes", float64(r.hdrBytes))
	put(k+"events", float64(r.events))
	put(k+"rate_per_s", perSecond(r.events, r.took))
	put(k+"client_us", perEvent(r.clientCPU, r.events))
	if r.natsKnown {
		put(k+"nats_us", perEvent(r.natsCPU, r.events))
	}
}

// printShapes writes L2S's table: each shape beside the relay's own.
func (r *report) printShapes(out io.Writer) {
	if len(r.shapes) == 0 {
		return
	}
	full := r.shapes[0]
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(out, "\nWhat the message shape costs: JetStream storing the same events from one connection (async, window 1024), in two passes")
	fmt.Fprintln(w, "headers\tnames\theader bytes\tevents/s\tnats-server µs/event\tvs the relay's\tclient µs/event\tvs the relay's\t")
	for _, s := range r.shapes {
		nats, natsVs := "n/a", ""
		if s.natsKnown && full.natsKnown {
			nats = fmt.Sprintf("%.1f", perEvent(s.natsCPU, s.events))
			natsVs = fmt.Sprintf("%.2f×", ratio(s.natsCPU, full.natsCPU))
		}
		fmt.Fprintf(w, "L2S %s: %s\t%d\t%d\t%s\t%s\t%s\t%.1f\t%.2f×\t\n", s.key, s.label, s.headers, s.hdrBytes, thousands(perSecond(s.events, s.took)),
			nats, natsVs, perEvent(s.clientCPU, s.events), ratio(s.clientCPU, full.clientCPU))
	}
	w.Flush()
}

// ratio is a/b, 0 when b is.
func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}
