package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Defaults of the Config fields left zero. (Config.DeadLetterSubject
// itself is required: the same subject must reach the stream and the
// checks; contract.DefaultDeadLetterSubject is the relay's default.)
const (
	DefaultWindow      = 4096
	DefaultWindowBytes = 64 << 20
	DefaultAckTimeout  = 5 * time.Second
)

// Config configures a Publisher.
type Config struct {
	// Subject renders each event's subject.
	Subject sink.Template
	// DeadLetterSubject receives events that can never be published as they
	// are, with the reason in a header.
	DeadLetterSubject string
	// Window is the most messages awaiting a PubAck at once
	// (DefaultWindow when zero).
	Window int
	// WindowBytes bounds the payload bytes held for messages awaiting a
	// PubAck (DefaultWindowBytes when zero); one larger message still goes
	// alone.
	WindowBytes int
	// AckTimeout is how long a PubAck may take before the outcome counts as
	// unknown and the message is republished (DefaultAckTimeout when zero).
	AckTimeout time.Duration
	// MaxMessageSize is the largest message (headers and payload) the stream
	// accepts; 0 means the server's max_payload.
	MaxMessageSize int
	// Stream, when set, is read after an outage: events it already holds
	// are not published again, whatever the dedup window.
	Stream natsjs.Stream
	// StartSeq is the stream's last sequence when the relay started; later
	// messages are candidates for that check until the first PubAck.
	StartSeq uint64
	// RecordDeadLetter, when set, records a dead-lettered event (in
	// Postgres) before it counts as settled; stored is the id its dead
	// letter is stored under (its Nats-Msg-Id without
	// contract.DeadLetterMsgIDPrefix). It is retried until it succeeds.
	RecordDeadLetter func(ctx context.Context, ev *decode.Event, stored, reason string) error
	// Source, when set, is stamped on every message (the Outbox-Source-*
	// headers), so that the relay can tell its messages from others'.
	Source *sink.Stamp
	// Replay, when set, marks every message as published again by hand
	// (contract.HeaderReplay, with this value): a one-shot publish from
	// the table, outside any slot's commit order.
	Replay string
	// Format is the form of event messages: the relay's own (the zero
	// Format) or CloudEvents.
	Format Format
	// FirstStored, when set, is called once, when the first message is
	// stored (its PubAck received), on the goroutine receiving PubAcks,
	// with the Publisher's lock held: it must not block. The relay ends its
	// start-up trace there.
	FirstStored func()
	// Tracer, when set, traces every event from its commit to its PubAck
	// (see trace.go); nil turns tracing off at no cost per event.
	Tracer trace.TracerProvider
	// Atomic publishes the events of each transaction (those offered
	// before an EndBatch) as one atomic batch, stored all or none
	// (atomic.go); the stream must allow it (StreamSpec.Atomic).
	// AtomicLimit is the most events of one (DefaultAtomicLimit when
	// zero); larger transactions go out as ordinary messages.
	Atomic      bool
	AtomicLimit int
	// FastIngest, when auto (and Atomic is off), publishes in fast-ingest batches if the
	// server and Stream allow it (fastingest.go); off (or zero) publishes
	// every event with its own PubAck.
	FastIngest FastIngest
	// FastLinger is how long a fast-ingest batch stays open with nothing
	// to send before it commits (DefaultFastLinger when zero).
	FastLinger time.Duration
}

func (c *Config) setDefaults() {
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.WindowBytes <= 0 {
		c.WindowBytes = DefaultWindowBytes
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.AtomicLimit <= 0 {
		c.AtomicLimit = DefaultAtomicLimit
	}
}

// Publisher publishes events to JetStream asynchronously and in order.
//
// Up to Window messages are on the wire at once, each with its own reply
// subject, so every PubAck is tracked individually. Sequence numbers are
// assigned in the order events are offered (WAL order); AckedThrough tells
// how far the unbroken run of acknowledged events reaches.
//
// On the first failure (an error reply, an ack timeout, a dropped
// connection) the Publisher stops sending, lets every message in flight
// settle, then republishes from the first unacknowledged event, in order:
// first that event alone until it succeeds, then the rest. It never uses
// the client's reconnect buffer and never lets a later message overtake an
// earlier one that it still has to send. Republished messages keep their
// Nats-Msg-Id, so JetStream drops copies it already stored.
//
// Each message remembers the connection it went out on (nats.go's count
// of reconnects, raised before anything can be sent on a new connection).
// The client reconnects on its own and reports the drop asynchronously, so
// before each write the Publisher compares the connection with the one it
// saw last: on a new one, every message still awaiting its PubAck from an
// older one fails there and then (its PubAck went to the old connection,
// and it may have been lost with it), and nothing more is sent until
// recovery has learned from the stream what it holds. One window remains:
// a reconnect that completes between that check and the write itself
// (nats.go offers no way to do both under its lock); the next check
// catches it, but that one message may then be stored ahead of earlier
// ones lost with the old connection.
//
// Offer and the methods used by the replication side are called from one
// goroutine; Run is driven by another; PubAcks arrive on a third.
type Publisher struct {
	nc      *nats.Conn
	cfg     Config
	log     zerolog.Logger
	metrics *Metrics
	tracer  *tracer // nil: not traced
	inbox   string  // replies arrive on inbox + "<seq>.<attempt>"
	sub     *nats.Subscription
	maxSize int
	// instance tells this publisher's dead letters of events read from
	// the table apart from any other's (see deadLetterID), and its
	// fast-ingest batches.
	instance string
	fi       *fastBatch // nil: no fast ingest

	sendMu sync.Mutex // held while writing, so messages leave in sequence order
	wire   *wireMsg   // guarded by sendMu
	// probeGuard, when set, is the Nats-Expected-Last-Subject-Sequence the
	// next message written (recovery\'s probe) carries. Guarded by sendMu.
	probeGuard string
	subjects   *sink.SubjectCache // guarded by sendMu
	replyBuf   []byte             // guarded by sendMu

	mu       sync.Mutex
	conn     uint64 // the newest connection seen; older ones have nothing on the wire
	ring     []slot
	mask     uint64
	head     uint64 // oldest unsettled sequence number
	next     uint64 // next sequence number to assign
	sendNext uint64 // next sequence number to send
	bytes    int    // payload bytes held by unsettled slots
	healthy  bool   // false from a failure until recovery resent everything
	problem  error  // the failure that started the current outage
	// lastFailure is the latest failure (recovery's probe's, in an outage).
	lastFailure error
	// beforeProbe, set by tests only, runs just before recovery sends its
	// probe (after the stream was read and the probe's guard computed).
	beforeProbe func(ev *decode.Event)
	// streamName is Config.Stream's name, lastStreamSeq the newest
	// sequence in it of a released message (settled, and every earlier
	// one too): an unacknowledged message it holds comes after it. PubAcks
	// from another stream (one that holds the dead-letter subject) say
	// nothing about it: deadStream is that stream, deadSeq the same mark
	// in it.
	streamName    string
	replicas      int // Config.Stream's, as of NewPublisher
	lastStreamSeq uint64
	deadStream    string
	deadSeq       uint64
	// deadLetters is the stream holding the dead-letter subject when it is
	// not Config.Stream, as recovery looked it up (Run's goroutine only).
	deadLetters   natsjs.Stream
	recordQ       []uint64 // dead letters stored in NATS, waiting for their record
	limitsChanged bool     // the stream refused a message as too large: reread its limits

	recordLogs *retry.LogLimiter
	stored     bool // a message was stored (FirstStored was called)
	// blocked is what keeps the stream from storing the next event, as
	// recovery last found it (Run's goroutine only); nil when nothing
	// known does.
	blocked      *Blocked
	blockedSince time.Time

	atomic *atomicTx // nil: atomic transactions off

	acked atomic.Uint64 // every sequence number <= acked is settled
	room  chan struct{} // a slot was freed
	wake  chan struct{} // wakes Run: a failure, or a slot settled during recovery
}

type slotState uint8

const (
	queued    slotState = iota // waiting to be sent (again)
	sent                       // on the wire, waiting for its reply
	recording                  // a dead letter stored by JetStream, its Postgres record pending
	acked                      // stored by JetStream (or found to be stored already), and recorded
	failed                     // error reply, timeout or disconnect: to be sent again
)

type slot struct {
	seq        uint64
	ev         decode.Event
	state      slotState
	attempt    uint32
	conn       uint64 // the connection the last attempt went out on
	streamSeq  uint64 // where the stream holds it, once stored
	deadStream bool   // stored by the stream of the dead-letter subject, not Config.Stream
	sentAt     time.Time
	since      time.Time // commit time, or when offered if unknown: for the oldest-pending age
	batchStart time.Time // set on the last event of a batch (EndBatch): when the batch started
	size       int
	deadLetter string // why the event goes to the dead-letter subject; "" if it does not
	fiBatch    uint64 // the fast-ingest batch of the last attempt; 0: an ordinary publish
	fiSeq      uint64 // its place in the batch
	bare       bool   // the dead letter was refused too: send it without payload
	span       eventSpan

	batch batchMark // its atomic batch (Config.Atomic)
}

// NewPublisher subscribes to PubAck replies on nc and returns a Publisher.
// Call Close when done.
func NewPublisher(nc *nats.Conn, cfg Config, log zerolog.Logger, metrics *Metrics) (*Publisher, error) {
	cfg.setDefaults()
	if cfg.DeadLetterSubject == "" {
		return nil, errors.New("sink: dead-letter subject is required")
	}
	if err := cfg.Format.Validate(); err != nil {
		return nil, fmt.Errorf("sink: message format: %w", err)
	}
	size := 1
	for size < cfg.Window {
		size <<= 1
	}
	p := &Publisher{
		nc:       nc,
		cfg:      cfg,
		log:      log,
		metrics:  metrics,
		tracer:   newTracer(cfg.Tracer, cfg.Subject),
		inbox:    nc.NewInbox() + ".",
		instance: newInstance(),
		wire:     newWireMsg().withSource(cfg.Source).withReplay(cfg.Replay).withFormat(cfg.Format),
		subjects: sink.NewSubjectCache(cfg.Subject),
		ring:     make([]slot, size),
		mask:     uint64(size - 1),
		head:     1,
		next:     1,
		healthy:  true,
		room:     make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),

		recordLogs: retry.NewLogLimiter(),
	}
	p.sendNext = 1
	if cfg.Atomic {
		p.atomic = &atomicTx{limit: min(cfg.AtomicLimit, cfg.Window), from: 1, closed: 1}
	}
	p.conn = p.connection()
	if cfg.Stream != nil {
		if info := cfg.Stream.CachedInfo(); info != nil {
			p.streamName, p.replicas = info.Config.Name, info.Config.Replicas
			metrics.roomFor(p.streamName)
		}
	}
	p.maxSize = int(nc.MaxPayload())
	if cfg.MaxMessageSize > 0 && (p.maxSize <= 0 || cfg.MaxMessageSize < p.maxSize) {
		p.maxSize = cfg.MaxMessageSize
	}
	sub, err := nc.Subscribe(p.inbox+"*.*", p.onReply)
	if err != nil {
		return nil, fmt.Errorf("subscribe to PubAck replies: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("set PubAck subscription limits: %w", err)
	}
	p.sub = sub
	if err := p.setupFastIngest(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return p, nil
}

// Close stops receiving PubAcks. The spans of events still unacknowledged
// end, marked so.
func (p *Publisher) Close() error {
	err := errors.Join(p.sub.Unsubscribe(), p.closeFast())
	p.mu.Lock()
	defer p.mu.Unlock()
	for seq := p.head; seq < p.next; seq++ {
		p.ring[seq&p.mask].span.abandoned()
	}
	return err
}

// Offer queues ev for publishing and returns its sequence number. It never
// blocks: ok is false when the window is full; wait on Room and offer again.
func (p *Publisher) Offer(ev *decode.Event) (seq uint64, ok bool) {
	size := len(ev.Payload)
	p.mu.Lock()
	n := p.next - p.head
	if n >= uint64(p.cfg.Window) || (n > 0 && p.bytes+size > p.cfg.WindowBytes) {
		send := p.atomicFullLocked()
		p.mu.Unlock()
		if send {
			p.sendQueued(false)
		}
		return 0, false
	}
	var span eventSpan
	if p.tracer != nil {
		span = p.tracer.start(ev)
	}
	since := ev.CommitTime
	if since.IsZero() {
		since = time.Now()
	}
	if n == 0 {
		p.metrics.setOldest(since)
	}
	seq = p.next
	p.next++
	s := &p.ring[seq&p.mask]
	*s = slot{seq: seq, ev: *ev, size: size, since: since, span: span}
	p.bytes += size
	send := p.atomicOfferLocked(s) && p.healthy
	p.mu.Unlock()
	p.metrics.InFlight.Inc()
	p.metrics.Pending.Inc()
	if send {
		p.sendQueued(false)
	}
	return seq, true
}

// EndBatch marks the newest offered event as the last of a batch (a
// transaction) that started at start: when it and every event before it
// are stored, outbox_batch_duration_seconds observes the time since start.
// Call it from the goroutine that offers.
func (p *Publisher) EndBatch(start time.Time) {
	if p.atomic != nil {
		p.closeTransaction()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.next - 1
	if last < p.head { // stored and released already (or nothing offered)
		if last > 0 {
			p.metrics.BatchDuration.Observe(time.Since(start).Seconds())
		}
		return
	}
	p.ring[last&p.mask].batchStart = start
}

// Room is signalled when messages settle and the window has room again.
func (p *Publisher) Room() <-chan struct{} { return p.room }

// AckedThrough returns the newest sequence number such that it and every
// earlier one are acknowledged (0 before the first).
func (p *Publisher) AckedThrough() uint64 { return p.acked.Load() }

// outage reports that a publish failed and JetStream has not accepted the
// first unacknowledged event again yet.
func (p *Publisher) outage() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.healthy
}

// Pending returns how many offered events are not yet acknowledged.
func (p *Publisher) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.next - p.head)
}

// Drain waits until every offered event is acknowledged, or ctx ends.
func (p *Publisher) Drain(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n := p.unended()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain: %d events still unacknowledged: %w", n, context.Cause(ctx))
		case <-p.room:
		case <-tick.C:
		}
	}
}

// sendQueued writes queued messages in sequence order. With probe set it
// sends only the first one and ignores the outage flag: recovery uses it
// to test whether JetStream accepts messages again.
func (p *Publisher) sendQueued(probe bool) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	for {
		conn := p.connection()
		p.mu.Lock()
		p.connectionSeenLocked(conn)
		if (!p.healthy && !probe) || p.sendNext >= p.sendEndLocked() {
			p.abandonBatchLocked()
			p.mu.Unlock()
			return
		}
		s := &p.ring[p.sendNext&p.mask]
		p.sendNext++
		if s.state == acked || s.state == recording {
			p.mu.Unlock()
			continue
		}
		p.prepareBatchLocked(s)
		if p.fastWaitLocked(s, probe) { // Run sends it once the batch before is confirmed
			p.sendNext--
			p.mu.Unlock()
			return
		}
		s.attempt++
		s.state, s.sentAt, s.conn = sent, time.Now(), conn
		fast := p.fastAssignLocked(s, probe)
		// Copy what the wire needs: once the lock is released a late reply
		// may settle the slot and the ring may reuse it.
		seq, attempt, ev, deadLetter, bare, span, mark := s.seq, s.attempt, s.ev, s.deadLetter, s.bare, s.span, s.batch
		p.mu.Unlock()

		if err := p.write(seq, attempt, &ev, deadLetter, bare, &span, mark, fast); err != nil {
			p.settle(seq, attempt, reply{err: err})
		}
		if probe && (!mark.batched() || seq == mark.commit()) {
			return // a batch is recovery's probe as a whole
		}
	}
}

// connection identifies the connection nc is on: how often it reconnected.
// nats.go counts a reconnect, under the connection's lock, before anything
// can be sent on the new connection, so a message written after this call
// goes out on this connection or a newer one.
func (p *Publisher) connection() uint64 { return p.nc.Stats().Reconnects }

// connectionSeenLocked notes that nc is on connection conn. The first time
// it sees a connection, every message still awaiting its PubAck from an
// older one fails: the PubAck went to the old connection and will never
// arrive, and the message may have been lost with it, so nothing may go
// out on the new connection before recovery (which then reads the stream).
func (p *Publisher) connectionSeenLocked(conn uint64) {
	if conn <= p.conn {
		return
	}
	p.conn = conn
	for seq := p.head; seq < p.next; seq++ {
		if s := &p.ring[seq&p.mask]; s.state == sent && s.conn < conn {
			s.state = failed
			p.failLocked(errReconnected, s)
		}
	}
}

// Rejects returns why ev cannot be published as it is (it would go to the
// dead-letter subject), or "" when it can.
func (p *Publisher) Rejects(ev *decode.Event) string {
	w := newWireMsg().withSource(p.cfg.Source).withReplay(p.cfg.Replay).withFormat(p.cfg.Format)
	if p.tracer != nil {
		w.traceparent = traceparentSized // the size the span's will have
	}
	w.fillEvent(ev, p.cfg.Subject.Render(ev), p.inbox)
	p.sendMu.Lock() // guards maxSize
	defer p.sendMu.Unlock()
	return p.reasonFor(w, ev)
}

// deadLetterReason returns why ev, filled into the wire message, cannot be
// published as it is; "" when it can.
func (p *Publisher) deadLetterReason(ev *decode.Event) string { return p.reasonFor(p.wire, ev) }

func (p *Publisher) reasonFor(w *wireMsg, ev *decode.Event) string {
	if ev.Problem != "" {
		return ev.Problem
	}
	if w.ce != nil {
		if problem := ceProblem(ev); problem != "" {
			return problem
		}
	}
	hs := w.headerBytes()
	switch {
	case hs+len(ev.Payload) > p.maxSize:
		return fmt.Sprintf("message of %d bytes is larger than the %d bytes the server and stream accept", hs+len(ev.Payload), p.maxSize)
	case hs > maxHeaderBytes:
		return fmt.Sprintf("headers of %d bytes are larger than JetStream's %d", hs, maxHeaderBytes)
	}
	return ""
}

// write puts one message on the connection. An event that cannot be
// published as it is (a Problem, or too large) goes to the dead-letter
// subject instead: it is never sent as is. The message carries span's
// trace context when the event is traced.
func (p *Publisher) write(seq uint64, attempt uint32, ev *decode.Event, deadLetter string, bare bool, span *eventSpan, mark batchMark, fast fastSend) error {
	replyTo := p.replySubject(seq, attempt)
	subject := p.subjects.Render(ev)
	if fast.id != 0 {
		replyTo = p.fastWriting(fast, subject)
	}
	p.wire.traceparent, p.wire.tracestate = span.traceparent, span.tracestate
	if deadLetter == "" {
		p.wire.fillEvent(ev, subject, replyTo)
		if deadLetter = p.deadLetterReason(ev); deadLetter != "" {
			if fast.id != 0 { // a dead letter goes out on its own
				p.fastUnassign(seq, fast)
				replyTo = p.replySubject(seq, attempt)
			}
			p.markDeadLetter(seq, deadLetter)
		} else if p.probeGuard != "" {
			p.wire.set(natsjs.ExpectedLastSubjSeqHeader, p.probeGuard)
		}
	}
	p.probeGuard = ""
	if deadLetter != "" {
		limit := p.maxSize
		if bare {
			limit = 0
		}
		p.wire.fillDeadLetter(ev, p.deadLetterID(ev, seq), p.cfg.DeadLetterSubject, replyTo, subject, deadLetter, limit)
		p.log.Warn().Str("event_id", ev.ID).Str("table", ev.Table).Str("event_type", ev.EventType).Str("aggregate_id", ev.AggregateID).
			Str("lsn", formatLSN(ev.Position.CommitLSN)).Str("reason", deadLetter).
			Msg("event cannot be published as it is: sending it to the dead-letter subject")
	}
	if deadLetter != "" {
		span.deadLettered(p.cfg.DeadLetterSubject, deadLetter)
	}
	p.batchHeaders(seq, attempt, mark, deadLetter != "")
	return p.nc.PublishMsg(&p.wire.msg)
}

// markDeadLetter remembers why seq goes to the dead-letter subject, before
// it is sent, so that its PubAck is taken for a dead letter's.
func (p *Publisher) markDeadLetter(seq uint64, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := &p.ring[seq&p.mask]; s.seq == seq {
		s.deadLetter = reason
	}
}

// replySubject returns the reply subject for an attempt at seq. The string
// views a buffer reused for the next message: nats.go copies the subject
// into its write buffer before PublishMsg returns. Call with sendMu held.
func (p *Publisher) replySubject(seq uint64, attempt uint32) string {
	b := append(p.replyBuf[:0], p.inbox...)
	b = appendUint(b, seq)
	b = append(b, '.')
	b = appendUint(b, uint64(attempt))
	p.replyBuf = b
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func appendUint(b []byte, v uint64) []byte {
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}

// onReply handles a PubAck (or error) arriving on the reply subscription.
func (p *Publisher) onReply(m *nats.Msg) {
	seq, attempt, ok := parseReplySubject(m.Subject[min(len(p.inbox), len(m.Subject)):])
	if !ok {
		return
	}
	p.settle(seq, attempt, parseReply(m))
	p.sendIfDue()
}

func parseReplySubject(s string) (seq uint64, attempt uint32, ok bool) {
	var n uint64
	part := 0
	digits := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9' && digits < 19:
			n = n*10 + uint64(c-'0')
			digits++
		case c == '.' && part == 0 && digits > 0:
			seq, n, part, digits = n, 0, 1, 0
		default:
			return 0, 0, false
		}
	}
	if part != 1 || digits == 0 || n > 1<<32-1 {
		return 0, 0, false
	}
	return seq, uint32(n), true
}

// settle records the outcome of one attempt at sending seq.
func (p *Publisher) settle(seq uint64, attempt uint32, r reply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq < p.head || seq >= p.next {
		return // settled and released already: a late reply
	}
	s := &p.ring[seq&p.mask]
	if s.state == acked || s.state == recording {
		return
	}
	if s.batch.batched() && s.deadLetter == "" {
		p.settleBatchLocked(s, attempt, r)
		return
	}
	if r.err != nil {
		if attempt != s.attempt || s.state != sent {
			return // an older attempt's error: the newest attempt decides
		}
		s.state = failed
		if Permanent(r.err) {
			if s.deadLetter == "" && s.ev.Problem == "" {
				s.deadLetter = r.err.Error()
			} else {
				// Even the dead letter was refused: send it without payload.
				// If that is refused too, the relay stalls and says so.
				s.bare = true
			}
			p.limitsChanged = true
		}
		p.failLocked(r.err, s)
		return
	}
	// Any attempt's PubAck means the message is stored.
	p.storedLocked(s, r)
}

// storedLocked records that the stream r names holds slot s's message.
func (p *Publisher) storedLocked(s *slot, r reply) {
	if s.deadLetter == "" && s.ev.Problem != "" {
		s.deadLetter = s.ev.Problem
	}
	s.streamSeq, s.deadStream = r.streamSeq, false
	if p.streamName != "" && string(r.stream) != p.streamName && s.deadLetter != "" {
		// The dead-letter subject is another stream's.
		if p.deadStream != string(r.stream) {
			p.deadStream, p.deadSeq = string(r.stream), 0
		}
		s.deadStream = true
	}
	if s.deadLetter != "" && p.cfg.RecordDeadLetter != nil {
		s.state = recording
		p.recordQ = append(p.recordQ, s.seq)
		signal(p.wake)
	} else {
		s.state = acked
	}
	p.metrics.AckLatency.Observe(time.Since(s.sentAt).Seconds())
	s.span.stored(r, s.deadLetter)
	if !p.stored {
		p.stored = true
		if p.cfg.FirstStored != nil {
			p.cfg.FirstStored()
		}
	}
	if e := p.log.Debug(); e.Enabled() {
		e.Str("event_id", s.ev.ID).Str("event_type", s.ev.EventType).Str("aggregate_id", s.ev.AggregateID).
			Str("lsn", formatLSN(s.ev.Position.CommitLSN)).Uint64("stream_seq", r.streamSeq).Bool("duplicate", r.duplicate).Msg("stored")
	}
	switch {
	case r.duplicate:
		p.metrics.Duplicates.Inc()
	case s.deadLetter != "":
		p.metrics.DeadLettered.Inc()
	default:
		p.metrics.Published.Inc()
		if !s.ev.CommitTime.IsZero() {
			p.metrics.CommitToStored.Observe(sinceCommit(s.ev.CommitTime))
		}
	}
	if s.deadLetter != "" {
		p.metrics.failed(s.ev.EventType)
	} else {
		p.metrics.EventsPublished.Inc()
	}
	p.advanceLocked()
	if !p.healthy {
		signal(p.wake)
	}
}

// advanceLocked releases the acknowledged slots at the head of the window.
func (p *Publisher) advanceLocked() {
	start := p.head
	for p.head < p.next {
		s := &p.ring[p.head&p.mask]
		if s.state != acked {
			break
		}
		if s.deadStream {
			p.deadSeq = max(p.deadSeq, s.streamSeq)
		} else {
			p.lastStreamSeq = max(p.lastStreamSeq, s.streamSeq)
		}
		p.bytes -= s.size
		if !s.batchStart.IsZero() {
			p.metrics.BatchDuration.Observe(time.Since(s.batchStart).Seconds())
		}
		s.ev = decode.Event{} // let the payload be collected
		p.head++
	}
	if p.head == start {
		return
	}
	if p.sendNext < p.head {
		p.sendNext = p.head
	}
	p.acked.Store(p.head - 1)
	p.metrics.InFlight.Sub(float64(p.head - start))
	p.metrics.Pending.Sub(float64(p.head - start))
	if p.head < p.next {
		p.metrics.setOldest(p.ring[p.head&p.mask].since)
	} else {
		p.metrics.setOldest(time.Time{})
	}
	p.atomicAdvancedLocked()
	signal(p.room)
}

// failLocked starts (or continues) an outage.
func (p *Publisher) failLocked(err error, s *slot) {
	p.metrics.Failures.WithLabelValues(failureReason(err)).Inc()
	p.metrics.failed(s.ev.EventType)
	s.span.failed(err)
	p.lastFailure = err
	p.fastClosedLocked()
	if !p.healthy {
		return
	}
	p.healthy = false
	p.problem = err
	p.log.Error().Err(err).Str("event_id", s.ev.ID).Str("event_type", s.ev.EventType).
		Str("aggregate_id", s.ev.AggregateID).Str("lsn", formatLSN(s.ev.Position.CommitLSN)).
		Str("hint", Hint(err)).Msg("publish failed: pausing, letting in-flight publishes settle, then republishing in order")
	signal(p.wake)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func failureReason(err error) string {
	var se *ServerError
	switch {
	case errors.Is(err, ErrAckTimeout):
		return "timeout"
	case disconnected(err):
		return "disconnected"
	case errors.Is(err, ErrNoResponders):
		return "no_responders"
	case noRoom(err):
		return "stream_full"
	case errors.As(err, &se) && Permanent(err):
		return "rejected"
	case errors.As(err, &se):
		return "server_error"
	default:
		return "other"
	}
}

// deadLetterID is the id the dead letter of ev, handed over as seq, is
// stored under: its Nats-Msg-Id without contract.DeadLetterMsgIDPrefix.
// It is the event's id; for an id a Nats-Msg-Id cannot carry, the event's
// WAL position, unique in the slot's WAL (sink.StoredID). An event read
// from the table has none: its position (commit LSN 0) restarts with
// every polling batch, every slot creation and every one-shot run, and
// JetStream would drop the second dead letter at one as a duplicate. Its
// id adds this publisher's instance and seq: unique in the stream, and
// the same on every resend of it.
func (p *Publisher) deadLetterID(ev *decode.Event, seq uint64) string {
	id := sink.StoredID(ev)
	if contract.CheckID(ev.ID) == "" || ev.Position.CommitLSN != 0 {
		return id
	}
	return id + "@" + p.instance + "." + strconv.FormatUint(seq, 10)
}

// newInstance returns 16 random hex digits.
func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
