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
// its BatchPublisher.CommitMsg and PublishMsgBatch wait for each batch's
// commit reply (RequestMsgWithContext), one batch at a time; AddMsg, with
// its default flow control (AckFirst), waits for the first message's
// reply too, and copies every message's header map; the replies come on
// the client's own inboxes, so they cannot be told to the Publisher's
// reply subjects (sequence number and attempt), nor a batch tied to the
// connection it went out on. The Publisher keeps a window
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

func (p *Publisher) logFallbackLocked(first, n uint64, reason string) {
	s := &p.ring[first&p.mask]
	p.log.Warn().Str("event_id", s.ev.ID).Str("event_type", s.ev.EventType).Str("aggregate_id", s.ev.AggregateID).
		Str("lsn", formatLSN(s.ev.Position.CommitLSN)).Uint64("events", n).Str("reason", reason).
		Msg("transaction not published atomically: its events go out as ordinary messages, marked " + contract.HeaderAtomicFallback)
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
	// Headers go through set and del, never the map itself: the wire
	// message keeps its header block's size as they change (wireknown.go),
	// and that size decides what is too large to publish.
	w := p.wire
	if deadLetter || !mark.batched() {
		w.del(headerBatchID)
		w.del(headerBatchSeq)
		w.del(headerBatchCommit)
		if mark.fallback != "" {
			w.set(contract.HeaderAtomicFallback, mark.fallback)
		} else {
			w.del(contract.HeaderAtomicFallback)
		}
		return
	}
	w.del(contract.HeaderAtomicFallback)
	if seq == mark.first {
		a.batchID = p.instance + "." + strconv.FormatUint(seq, 10) + "." + strconv.FormatUint(uint64(attempt), 10)
	}
	p.wire.set(headerBatchID, a.batchID)
	p.wire.set(headerBatchSeq, strconv.FormatUint(seq-mark.first+1, 10))
	if seq == mark.commit() {
		p.wire.set(headerBatchCommit, "1")
		return
	}
	w.del(headerBatchCommit)
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
