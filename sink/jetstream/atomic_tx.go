package jetstream

import "fmt"

// Which events go out in which atomic batch (Config.Atomic): transactions
// held until they end, whole transactions waiting for the batch in flight,
// and those that go out as ordinary messages. The protocol and the
// replies are in atomic.go.

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
