package replication

import "time"

// The live mark: one wake-up per transaction at a steady rate.
//
// Near the end of the WAL the walsender sends each pgoutput message of a
// transaction in a send() of its own (BEGIN, each change, COMMIT), and
// before it waits for more WAL a keepalive, because the relay has not yet
// confirmed what it was sent. With a low-water mark of one byte the relay
// wakes for each of them: at 1,000 one-row transactions a second that is
// about three wake-ups and reads per event, and each wake-up of an idle Go
// process costs more CPU than the event (the netpoller, the scheduler,
// sysmon woken by the first system call).
//
// So from the session's first COMMIT the receive low-water mark is
// liveBytes instead: more than what arrives between two events (a COMMIT,
// 56 bytes with its CopyData and XLogData headers, a keepalive, 23, and
// the next BEGIN, 51: 130), less than a BEGIN with the change after it (an
// outbox row's INSERT alone is over 130 bytes). The relay then wakes when
// a change arrives, not for the messages around it: those are read with
// the next change, or at the latest liveLinger after the last message
// read. An event is never held back: it is offered at its INSERT, and
// the INSERT (with its BEGIN) is over the mark. What waits is its COMMIT,
// which only moves the position confirmed at the next status update, and
// keepalives, which, like the coalescing's, are read within the linger or
// at the next status update (at most wal_sender_timeout/2 away, so a
// reply the walsender asks for is never late: the relay sends its status
// on its own clock anyway). A change smaller than the mark (an emitted
// message with a tiny content) waits for the linger, never longer. A sink
// that holds events until their COMMIT (atomic transactions:
// Config.HeldToCommit) would be held with it, so the mark stays off then.
//
// The session's end (finish) sets the mark back to one byte: the
// walsender's answer to the final status update is a keepalive.
const (
	liveBytes  = 160
	liveLinger = coalesceLinger
)

// goLive sets the live mark; the session calls it at its first COMMIT, so
// that the first event is read at once. While coalescing, the coalescing
// mark stays, and the live mark follows when coalescing stops.
func (c *coalescer) goLive() {
	if c.live || c.raw == nil {
		return
	}
	c.live = true
	if !c.on {
		c.set(false)
	}
}

// stop sets the mark back to one byte, coalescing or not: the session ends
// and must hear every short reply at once.
func (c *coalescer) stop() {
	c.live = false
	if c.on || c.lowat > 1 {
		c.set(false)
	}
}

// liveDeadline returns the read deadline while the live mark holds: the
// next status update, or sooner liveLinger after the last message read
// (lastRecv), so that a COMMIT or keepalive left under the mark is read
// once the stream pauses. Once that passed, only the status update wakes
// the relay: an idle stream costs no more wake-ups than before. A
// deadline armed already (armed) stays while it is at least half a linger
// after the last read: moving it for every message would cost a timer
// update per message.
func (c *coalescer) liveDeadline(now, lastRecv, wakeAt, armed time.Time) time.Time {
	if !c.live || c.on {
		return wakeAt
	}
	at := lastRecv.Add(liveLinger)
	if !at.After(now) || !at.Before(wakeAt) {
		return wakeAt
	}
	if armed.After(now) && !armed.After(at) && !armed.Before(lastRecv.Add(liveLinger/2)) {
		return armed
	}
	return at
}
