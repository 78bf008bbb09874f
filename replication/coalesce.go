package replication

import (
	"crypto/tls"
	"net"
	"syscall"
	"time"
)

// Coalescing reads while a backlog drains.
//
// A reader that keeps up with the walsender gets every pgoutput message
// in a read of its own: the walsender flushes after each one, the relay
// wakes for each, publishes each in a write of its own, and nats-server
// answers each with a PubAck in a packet of its own. Per event that is a
// wake-up of each of the three processes, and on a machine they share it
// costs more CPU than the work itself: the relay spends 40–90 µs per event
// instead of ~9, nats-server and the walsender twice their cost.
//
// While the relay decodes transactions that committed long ago (a backlog:
// a few milliseconds more before the next read change nothing, the events
// waited already), it asks the kernel not to wake it before coalesceBytes
// are waiting on the socket (SO_RCVLOWAT), or coalesceLinger passed. The
// mark stays under a quarter of the socket's receive buffer: Linux would
// otherwise grow the buffer and clamp the TCP window to the mark (a window
// a segment short of it wakes the relay only at the linger), and fixing
// the buffer with SO_RCVBUF instead would turn off its autotuning for good
// (capped by net.core.rmem_max, 208 KiB by default: a small window for a
// Postgres far away). A
// non-blocking read still returns whatever is there: only the wait for more
// is stretched, so no message, however small (a keepalive asking for a
// reply, an error), waits longer than coalesceLinger. Near the end of the
// WAL the relay reads every message as it comes, as before, so latency at
// normal rates is untouched.
//
// Whether the relay is behind is read from each transaction's BEGIN: the
// walsender's send time minus the commit time, both on the server's
// clock. A keepalive means the walsender waits for WAL (or for the relay):
// coalescing stops there, at the latest one linger after the backlog's end.
const (
	coalesceBytes  = 128 << 10
	coalesceLinger = 20 * time.Millisecond
	// Coalesce from a commit lag of coalesceOnLag; stop below coalesceOffLag.
	coalesceOnLag  = 250 * time.Millisecond
	coalesceOffLag = 50 * time.Millisecond
)

// coalescer switches a TCP connection's receive low-water mark. Only the
// goroutine that reads the connection uses it.
type coalescer struct {
	raw      syscall.RawConn // nil when the connection is not TCP
	on       bool
	live     bool      // the live mark (livemark.go) holds while not coalescing
	lowat    int       // the low-water mark set now
	lingerAt time.Time // a wait for coalesceBytes ends here
}

// newCoalescer returns a coalescer for c; on other than TCP (a Unix
// socket) it never switches on.
func newCoalescer(c net.Conn) *coalescer {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	co := &coalescer{}
	if tcp, ok := c.(*net.TCPConn); ok {
		if raw, err := tcp.SyscallConn(); err == nil {
			co.raw = raw
		}
	}
	return co
}

// commitLag takes the lag of a transaction being received: how long after
// its commit the walsender sent it. It reports whether coalescing switched.
func (c *coalescer) commitLag(lag time.Duration) bool {
	switch {
	case !c.on && lag >= coalesceOnLag:
		return c.set(true)
	case c.on && lag < coalesceOffLag:
		return c.set(false)
	}
	return false
}

// off stops coalescing (a keepalive came): the mark goes back to the live
// mark, or one byte before the session's first COMMIT. It reports whether
// coalescing switched. (The session's end uses stop.)
func (c *coalescer) off() bool {
	if !c.on {
		return false
	}
	return c.set(false)
}

func (c *coalescer) set(on bool) bool {
	if c.raw == nil {
		return false
	}
	lowat := 1
	if c.live {
		lowat = liveBytes
	}
	var serr error
	err := c.raw.Control(func(fd uintptr) {
		if on {
			var rcvbuf int
			rcvbuf, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
			lowat = max(1, min(coalesceBytes, rcvbuf/4))
		}
		if serr == nil {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, lowat)
		}
	})
	if err != nil || serr != nil {
		// Reading a message at a time is slower, never wrong.
		return false
	}
	c.on, c.lowat = on, lowat
	c.lingerAt = time.Time{}
	return true
}

// deadline returns the read deadline for the next receive: wakeAt (the
// next status update), or sooner the end of the current linger while
// coalescing.
func (c *coalescer) deadline(now, wakeAt time.Time) time.Time {
	if !c.on {
		return wakeAt
	}
	if !now.Before(c.lingerAt) {
		c.lingerAt = now.Add(coalesceLinger)
	}
	if c.lingerAt.Before(wakeAt) {
		return c.lingerAt
	}
	return wakeAt
}
