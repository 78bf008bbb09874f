package jetstream

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Atomic transactions (Config.Atomic): the events of one source
// transaction (Offer … EndBatch) go out in one atomic batch (nats-server
// 2.12+, a stream with allow_atomic), which the stream stores all or none,
// so that a consumer never sees half a transaction. Transactions that end
// while a batch is in flight share the next batch, whole (see atomicTx).
//
// The client side of the protocol is written here rather than taken from
// github.com/synadia-io/orbit.go/jetstreamext (v0.4.0, publishbatch.go):
// its BatchPublisher.Commit and PublishMsgBatch wait for each batch's
// commit reply (a blocking request), one batch at a time, and send each
// message with the client's reconnect buffer. The Publisher keeps a window
// of asynchronous publishes, batches among them, settles every reply by
// its own reply subject, remembers which connection each message went out
// on and republishes in order after a failure: none of which the library's
// API lets a caller do.
//
// The protocol, as nats-server v2.15.2 (server/stream.go,
// processJetStreamAtomicBatchMsg) implements it: every message carries
// Nats-Batch-Id (at most 64 bytes) and Nats-Batch-Sequence (1, 2, …); the
// last also Nats-Batch-Commit: 1. The server stages the messages and, on
// the commit, checks them all (duplicates, limits, headers) and stores
// them together, or none. A message with a reply subject before the commit
// gets an empty reply once staged; the relay sends those without one, as
// the commit's reply says everything: a PubAck with the commit's stream
// sequence ("batch" and "count" added), or an error. A staging error
// drops the batch and makes the commit's reply "batch is incomplete"
// (10176), as does a gap or the server's batch timeout (max_batch_timeout,
// 10 s by default, between two messages of one batch). Limits, all set in
// the server's jetstream { limits { … } } block, none visible to a client:
// max_batch_size (1,000 messages by default: Config.AtomicLimit must not
// exceed it), max_batch_inflight_per_stream (50) and
// max_batch_inflight_total (1,000 per server); a relay writes the
// messages of one batch back to back, so it has one batch open at a time.
//
// The outcome maps onto the in-order confirm rule: the commit's PubAck
// settles every event of the batch (stored at the consecutive stream
// sequences ending at the commit's); any error, a timeout or a dropped
// connection fails the whole batch, and recovery reads the stream as for
// any failure (atomic: it finds all of the batch, or none). A batch the
// server refuses for a reason retrying as a batch cannot cure (see
// fallbackReason), 10201 among them, goes out again as ordinary messages,
// after recovery read what the stream holds: those the stream lacks are
// stored, the others the duplicate window drops.

// DefaultAtomicLimit is the most events of a transaction published as one
// atomic batch when Config.AtomicLimit is zero: nats-server's default
// max_batch_size (streamDefaultMaxAtomicBatchSize).
const DefaultAtomicLimit = 1000

// Headers of atomic batch publishing (nats-server's JSBatchId,
// JSBatchSeq, JSBatchCommit).
const (
	headerBatchID     = "Nats-Batch-Id"
	headerBatchSeq    = "Nats-Batch-Sequence"
	headerBatchCommit = "Nats-Batch-Commit"
)

// JetStream error codes of atomic batches (nats-server errors.json).
const (
	errCodeAtomicDisabled          = 10174 // atomic publish is disabled
	errCodeAtomicIncomplete        = 10176 // batch is incomplete
	errCodeAtomicUnsupportedHeader = 10177 // unsupported header used
	errCodeAtomicTooLarge          = 10199 // batch is too large (the server's max_batch_size)
	errCodeAtomicDuplicate         = 10201 // batch contains duplicate message id
)

// batchMark places an event in an atomic batch.
type batchMark struct {
	first uint64 // sequence number of the batch's first event
	n     uint32 // events in the batch; 0: not in one
	// fallback, when set, says why the event goes out as an ordinary
	// message though atomic transactions are on; it becomes the
	// contract.HeaderAtomicFallback header.
	fallback string
}

// batched reports whether the event goes out in an atomic batch.
func (b batchMark) batched() bool { return b.n > 0 && b.fallback == "" }

func (b batchMark) commit() uint64 { return b.first + uint64(b.n) - 1 }

// atomicTx is the Publisher's state for atomic transactions. Guarded by
// Publisher.mu, but for the fields marked otherwise.
//
// The sequence numbers offered fall in three runs: before closed, events
// placed (in a batch, or alone) and free to be sent; from closed to from,
// whole transactions that ended while a batch was in flight, waiting to go
// out together as one batch (ends are where each of them ends); from from
// on, the open transaction, held until it ends. nats-server stages each
// batch of an R1 file stream in a file store of its own, synced to disk
// before the commit: per batch, not per event. Transactions that end while
// a batch is in flight therefore go out together once it is stored, as
// one batch of whole transactions (up to limit events): a drain of small
// transactions is stored in batches of up to limit, while a transaction
// that ends with nothing in flight goes out at once.
type atomicTx struct {
	limit int
	// from is the first sequence number of the open transaction (offered,
	// not yet ended by EndBatch): its events are held until it ends.
	from   uint64
	closed uint64
	ends   []uint64
	// lastCommit is the sequence number of the last batch's commit: while
	// it is not stored, ended transactions wait for it.
	lastCommit uint64
	// sendDue says events were placed that nobody sent yet.
	sendDue bool
	// fallback, when set, sends the open transaction as ordinary messages,
	// for this reason.
	fallback string
	// refused is set once the stream refused atomic publishing (10174):
	// every later transaction goes out as ordinary messages.
	refused bool
	// Guarded by Publisher.sendMu: the batch being written and the
	// sequence number last written.
	batchID     string
	lastWritten uint64
	lastMark    batchMark
}

// sendEndLocked is where sending stops: ended transactions wait to be
// placed, the open transaction's events for its end, unless they go out
// as ordinary messages.
func (p *Publisher) sendEndLocked() uint64 {
	if a := p.atomic; a != nil && a.fallback == "" {
		return a.closed
	}
	return p.next
}

// atomicOfferLocked places the event just offered in slot s in the open
// transaction; it reports whether the event may be sent now.
func (p *Publisher) atomicOfferLocked(s *slot) bool {
	a := p.atomic
	switch {
	case a == nil:
		return true
	case a.fallback != "":
		s.batch.fallback = a.fallback
		return true
	case a.refused:
		p.fallbackOpenLocked("the stream refuses atomic publishing")
		return true
	case p.next-a.from > uint64(a.limit):
		p.fallbackOpenLocked(fmt.Sprintf("transaction of more than %d events (an atomic batch holds at most %d)", a.limit, a.limit))
		return true
	}
	return p.takeDueLocked()
}

// atomicFullLocked is called when the window has no room: if the open
// transaction fills it, the transaction can never go out as one batch, and
// goes out as ordinary messages. It reports whether to send.
func (p *Publisher) atomicFullLocked() bool {
	a := p.atomic
	if a == nil || a.fallback != "" || p.head < a.from || p.next == a.from {
		return false
	}
	p.fallbackOpenLocked("transaction larger than the relay's window (--window, --window-bytes)")
	return p.healthy
}

// fallbackOpenLocked sends the open transaction as ordinary messages,
// after the ended transactions before it.
func (p *Publisher) fallbackOpenLocked(reason string) {
	a := p.atomic
	p.releaseLocked()
	a.sendDue = true
	a.fallback = reason
	for seq := a.from; seq < p.next; seq++ {
		p.ring[seq&p.mask].batch.fallback = reason
	}
	p.logFallbackLocked(a.from, p.next-a.from, reason)
}

func (p *Publisher) logFallbackLocked(first, n uint64, reason string) {
	s := &p.ring[first&p.mask]
	p.log.Warn().Str("event_id", s.ev.ID).Str("event_type", s.ev.EventType).Str("aggregate_id", s.ev.AggregateID).
		Str("lsn", formatLSN(s.ev.Position.CommitLSN)).Uint64("events", n).Str("reason", reason).
		Msg("transaction not published atomically: its events go out as ordinary messages, marked " + contract.HeaderAtomicFallback)
}

// closeTransaction ends the open transaction: two events or more become
// one atomic batch, unless one of them cannot be published as it is (a
// dead letter, which goes to another subject, maybe another stream): the
// transaction then goes out as ordinary messages. Called from the
// offering goroutine.
func (p *Publisher) closeTransaction() {
	p.mu.Lock()
	a := p.atomic
	from, to, fallback := a.from, p.next, a.fallback
	p.mu.Unlock()
	reason := ""
	if fallback == "" && to-from >= 2 {
		// The held slots are not on the wire: no reply touches them, and
		// only this goroutine offers.
		for seq := from; seq < to && reason == ""; seq++ {
			if !p.batchable(&p.ring[seq&p.mask]) {
				reason = "a dead letter in the transaction"
			}
		}
	}
	p.mu.Lock()
	switch {
	case to == from:
	case fallback != "":
		a.closed = to // sent already, as ordinary messages
	case reason != "":
		p.fallbackOpenLocked(reason)
		a.closed = to
	default:
		a.ends = append(a.ends, to)
	}
	a.from, a.fallback = to, ""
	if !p.batchBusyLocked() || a.from-a.closed >= uint64(a.limit) {
		p.releaseLocked()
	}
	send := p.healthy && p.takeDueLocked()
	p.mu.Unlock()
	if send {
		p.sendQueued(false)
	}
}

// batchBusyLocked reports whether the last batch placed is not stored yet.
func (p *Publisher) batchBusyLocked() bool {
	return p.atomic.lastCommit >= p.head
}

// releaseLocked places the ended transactions waiting to be sent: as few
// batches as hold them whole, up to limit events each (one event alone
// goes as an ordinary message).
func (p *Publisher) releaseLocked() {
	a := p.atomic
	start := a.closed
	for i := 0; i < len(a.ends); {
		end := a.ends[i]
		for i++; i < len(a.ends) && a.ends[i]-start <= uint64(a.limit); i++ {
			end = a.ends[i]
		}
		if end-start >= 2 {
			for seq := start; seq < end; seq++ {
				p.ring[seq&p.mask].batch = batchMark{first: start, n: uint32(end - start)}
			}
			a.lastCommit = end - 1
		}
		start = end
	}
	a.ends = a.ends[:0]
	if start != a.closed {
		a.closed, a.sendDue = start, true
	}
}

// takeDueLocked reports, once, that placed events wait to be sent.
func (p *Publisher) takeDueLocked() bool {
	due := p.atomic.sendDue
	p.atomic.sendDue = false
	return due
}

// atomicAdvancedLocked places the ended transactions once the batch they
// waited for is stored. Called whenever the head of the window moves.
func (p *Publisher) atomicAdvancedLocked() {
	if a := p.atomic; a != nil && len(a.ends) > 0 && !p.batchBusyLocked() {
		p.releaseLocked()
	}
}

// sendIfDue sends the events placed since the last send: on the goroutine
// that stored the batch they waited for (PubAcks, or Run's).
func (p *Publisher) sendIfDue() {
	if p.atomic == nil {
		return
	}
	p.mu.Lock()
	send := p.takeDueLocked() && p.healthy
	p.mu.Unlock()
	if send {
		p.sendQueued(false)
	}
}

// batchable reports whether the event in s can go out in an atomic batch:
// it is no dead letter. A bound on its headers is checked first, which
// every ordinary event meets; the exact check (Rejects) only for the rest.
func (p *Publisher) batchable(s *slot) bool {
	ev := &s.ev
	if ev.Problem != "" {
		return false
	}
	values := len(ev.ID) + len(ev.AggregateType) + len(ev.AggregateID) + len(ev.EventType) + len(ev.Table) + len(ev.CreatedAt)
	for _, h := range ev.Headers {
		values += len(h.Name) + len(h.Value)
	}
	// Percent-encoding at most triples a value; the source, trace,
	// CloudEvents and batch headers fit in 4 KiB.
	bound := 3*values + 4<<10
	p.sendMu.Lock()
	limit := p.maxSize
	p.sendMu.Unlock()
	if bound <= maxHeaderBytes && bound+len(ev.Payload) <= limit {
		return true
	}
	return p.Rejects(ev) == ""
}

// prepareBatchLocked checks, before slot s is written, that its batch
// goes out whole: from its first event, each one after the one before.
// Recovery may have found part of it stored (an earlier copy published
// as ordinary messages) or republish from the middle: the rest then goes
// out as ordinary messages. Call with sendMu and mu held.
func (p *Publisher) prepareBatchLocked(s *slot) {
	a, mark := p.atomic, s.batch
	if a == nil || !mark.batched() {
		return
	}
	partial := s.seq != mark.first && a.lastWritten != s.seq-1
	for seq := mark.first; seq <= mark.commit() && !partial && s.seq == mark.first; seq++ {
		st := p.ring[seq&p.mask].state
		partial = st == acked || st == recording
	}
	if partial {
		p.fallbackBatchLocked(mark, "part of the transaction is stored already")
	}
}

// fallbackBatchLocked sends the unsettled events of the batch mark as
// ordinary messages.
func (p *Publisher) fallbackBatchLocked(mark batchMark, reason string) {
	for seq := mark.first; seq <= mark.commit(); seq++ {
		if m := &p.ring[seq&p.mask]; m.seq == seq {
			m.batch.fallback = reason
		}
	}
	p.logFallbackLocked(mark.first, uint64(mark.n), reason)
}

// batchHeaders sets the atomic batch headers of the message being
// written for seq (and removes those of the message before). A message
// before the commit goes without a reply subject. Call with sendMu held.
func (p *Publisher) batchHeaders(seq uint64, attempt uint32, mark batchMark, deadLetter bool) {
	a := p.atomic
	if a == nil {
		return
	}
	a.lastWritten, a.lastMark = seq, mark
	h := p.wire.msg.Header
	if deadLetter || !mark.batched() {
		delete(h, headerBatchID)
		delete(h, headerBatchSeq)
		delete(h, headerBatchCommit)
		if mark.fallback != "" {
			p.wire.set(contract.HeaderAtomicFallback, mark.fallback)
		} else {
			delete(h, contract.HeaderAtomicFallback)
		}
		return
	}
	delete(h, contract.HeaderAtomicFallback)
	if seq == mark.first {
		a.batchID = p.instance + "." + strconv.FormatUint(seq, 10) + "." + strconv.FormatUint(uint64(attempt), 10)
	}
	p.wire.set(headerBatchID, a.batchID)
	p.wire.set(headerBatchSeq, strconv.FormatUint(seq-mark.first+1, 10))
	if seq == mark.commit() {
		p.wire.set(headerBatchCommit, "1")
		return
	}
	delete(h, headerBatchCommit)
	p.wire.msg.Reply = ""
}

// abandonBatchLocked fails the events of a batch left without its commit
// when sending stops in an outage: nothing will answer for them. Call
// with sendMu and mu held.
func (p *Publisher) abandonBatchLocked() {
	a := p.atomic
	if a == nil || !a.lastMark.batched() || a.lastWritten == a.lastMark.commit() {
		return
	}
	mark := a.lastMark
	for seq := mark.first; seq <= a.lastWritten; seq++ {
		if m := &p.ring[seq&p.mask]; m.seq == seq && m.state == sent {
			m.state = failed
		}
	}
	a.lastMark = batchMark{}
}

// awaitsCommitLocked reports whether s, sent in a batch before its
// commit, waits for the commit's reply rather than its own.
func (p *Publisher) awaitsCommitLocked(s *slot) bool {
	if p.atomic == nil || !s.batch.batched() || s.seq == s.batch.commit() {
		return false
	}
	c := &p.ring[s.batch.commit()&p.mask]
	return c.seq == s.batch.commit() && c.state == sent
}

// settleBatchLocked records the reply to an attempt at slot s, an event
// of an atomic batch: the commit's PubAck stores them all, an error fails
// them all.
func (p *Publisher) settleBatchLocked(s *slot, attempt uint32, r reply) {
	mark := s.batch
	if r.err != nil {
		if attempt != s.attempt || s.state != sent {
			return // an older attempt's error: the newest attempt decides
		}
		p.failBatchLocked(s, r.err)
		return
	}
	if s.seq != mark.commit() {
		return // an empty reply to a staged message (none is asked for)
	}
	// Any attempt's PubAck: the batch is stored, at the consecutive stream
	// sequences ending at the commit's.
	commit := mark.commit()
	for seq := mark.first; seq <= commit; seq++ {
		m := &p.ring[seq&p.mask]
		if seq < p.head || m.seq != seq || m.state == acked || m.state == recording {
			continue
		}
		p.storedLocked(m, reply{stream: r.stream, streamSeq: r.streamSeq - (commit - seq)})
	}
}

// failBatchLocked fails every event of s's batch still on the wire, and
// sends them as ordinary messages from now on when err is one a batch
// cannot get past.
func (p *Publisher) failBatchLocked(s *slot, err error) {
	mark := s.batch
	reason := fallbackReason(err)
	if reason != "" {
		var se *ServerError
		errors.As(err, &se)
		switch se.ErrCode {
		case errCodeAtomicDisabled:
			p.atomic.refused = true
		case errCodeAtomicTooLarge:
			p.lowerLimitLocked(int(mark.n))
		}
		p.fallbackBatchLocked(mark, reason)
	}
	for seq := mark.first; seq <= mark.commit(); seq++ {
		if m := &p.ring[seq&p.mask]; m.seq == seq && m.state == sent {
			m.state = failed
		}
	}
	p.failLocked(err, s)
}

// lowerLimitLocked halves the most events of a batch below n, a size the
// server refused (10199): its max_batch_size is lower than the relay's
// limit. The size is in the error's text only, which the relay does not
// parse: halving finds a size the server takes in a few refusals.
func (p *Publisher) lowerLimitLocked(n int) {
	a := p.atomic
	if limit := max(n/2, 1); limit < a.limit {
		a.limit = limit
		p.log.Warn().Int("refused", n).Int("limit", limit).
			Msg("the server refused an atomic batch as too large (its jetstream max_batch_size is lower): batches hold at most limit events from now on; raise max_batch_size to keep larger transactions whole")
	}
}

// fallbackReason returns why a batch that err refused goes out again as
// ordinary messages, or "" when it is sent again as a batch (a timeout,
// a lost connection, no room, too many batches in flight: what a retry
// can cure).
func fallbackReason(err error) string {
	var se *ServerError
	if !errors.As(err, &se) {
		return ""
	}
	switch se.ErrCode {
	case errCodeAtomicDuplicate:
		// Some of its events are stored already, within the duplicate
		// window: recovery finds them in the stream, or the window drops
		// the ordinary copies.
		return "the stream holds some of the transaction's events already (JetStream error 10201)"
	case errCodeAtomicTooLarge:
		return "the server's max_batch_size is lower than the batch (JetStream error 10199)"
	case errCodeAtomicDisabled:
		return "the stream refuses atomic publishing (JetStream error 10174)"
	case errCodeAtomicIncomplete, errCodeAtomicUnsupportedHeader:
		// A staging error (a message refused on its own) is reported as
		// an incomplete batch: the ordinary messages name it.
		return fmt.Sprintf("JetStream refused the batch: %s (error %d)", se.Description, se.ErrCode)
	}
	if Permanent(err) {
		return fmt.Sprintf("JetStream refused the batch: %s (error %d)", se.Description, se.ErrCode)
	}
	return ""
}

// unended returns how many offered events are not yet acknowledged, but
// for those of a transaction still open (held until its end, which a
// shutdown never brings: they are not confirmed, and read again).
func (p *Publisher) unended() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.atomic; a != nil && a.fallback == "" {
		return int(a.from - min(p.head, a.from))
	}
	return int(p.next - p.head)
}
