package replication

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func sockopt(t *testing.T, c net.Conn, opt int) int {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, opt)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v
}

// The coalescer switches on only for a commit lag of coalesceOnLag or
// more, off below coalesceOffLag or on a keepalive, and the socket's
// low-water mark follows: while on, at most coalesceBytes and a quarter of
// the receive buffer, whose size the coalescer leaves to the kernel.
func TestCoalescerSwitches(t *testing.T) {
	client, _ := tcpPair(t)
	co := newCoalescer(client)
	rcvbuf := sockopt(t, client, syscall.SO_RCVBUF)
	steps := []struct {
		lag     time.Duration
		off     bool // a keepalive instead of a commit lag
		on      bool
		changed bool
	}{
		{lag: coalesceOffLag, on: false},
		{lag: coalesceOnLag - time.Millisecond, on: false},
		{lag: coalesceOnLag, on: true, changed: true},
		{lag: 10 * time.Second, on: true},
		{lag: coalesceOffLag, on: true}, // between the two: keep
		{lag: coalesceOffLag - time.Millisecond, on: false, changed: true},
		{lag: time.Second, on: true, changed: true},
		{off: true, on: false, changed: true},
		{off: true, on: false},
	}
	for i, s := range steps {
		var changed bool
		if s.off {
			changed = co.off()
		} else {
			changed = co.commitLag(s.lag)
		}
		if co.on != s.on || changed != s.changed {
			t.Fatalf("step %d (%+v): on %v, switched %v", i, s, co.on, changed)
		}
		want := 1
		if s.on {
			want = min(coalesceBytes, rcvbuf/4)
		}
		if got := sockopt(t, client, syscall.SO_RCVLOWAT); got != want || want < 1 || (s.on && want < 16<<10) {
			t.Fatalf("step %d: SO_RCVLOWAT %d, want %d (receive buffer %d)", i, got, want, rcvbuf)
		}
		if got := sockopt(t, client, syscall.SO_RCVBUF); got < rcvbuf {
			t.Fatalf("step %d: receive buffer %d, was %d", i, got, rcvbuf)
		}
	}
}

// On a connection that is not TCP the coalescer never switches on.
func TestCoalescerNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	co := newCoalescer(a)
	if co.commitLag(time.Minute) || co.on {
		t.Fatal("switched on over a pipe")
	}
	wake := time.Now().Add(time.Second)
	if got := co.deadline(time.Now(), wake); !got.Equal(wake) {
		t.Fatalf("deadline %v, want the status update's %v", got, wake)
	}
}

// While coalescing, a message far smaller than the low-water mark (a
// keepalive asking for a reply is 18 bytes) still reaches a reader that
// waits with the coalescer's deadlines within about one linger: the wait
// for more bytes ends at the deadline, and the next read takes what is
// there. The next status update is a minute away, so a reader that waited
// for it would fail the test.
func TestCoalescerLoneMessageNotStuck(t *testing.T) {
	client, server := tcpPair(t)
	co := newCoalescer(client)
	if !co.commitLag(time.Minute) {
		t.Fatal("did not switch on")
	}
	wakeAt := time.Now().Add(time.Minute) // the next status update: far
	blocked := make(chan struct{})
	go func() {
		<-blocked
		_, _ = server.Write(make([]byte, 18))
	}()
	buf := make([]byte, 64)
	start := time.Now()
	timeouts := 0
	giveUp := time.Now().Add(30 * time.Second)
	for {
		if time.Now().After(giveUp) {
			t.Fatalf("the 18-byte message was not read in 30s while coalescing (%d read timeouts)", timeouts)
		}
		if err := client.SetReadDeadline(co.deadline(time.Now(), wakeAt)); err != nil {
			t.Fatal(err)
		}
		n, err := client.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if timeouts++; timeouts == 1 {
				close(blocked) // the reader waited once: now the message comes
				start = time.Now()
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n != 18 {
			t.Fatalf("read %d bytes, want 18", n)
		}
		break
	}
	// Generous: the machine is shared; without the linger it is a minute.
	if took := time.Since(start); took > 10*coalesceLinger+time.Second {
		t.Fatalf("the 18-byte message took %s to be read while coalescing (linger %s)", took, coalesceLinger)
	}
	if timeouts < 1 {
		t.Fatal("the reader never waited")
	}
}

// The linger is armed once and kept until it passes, never beyond the
// next status update.
func TestCoalescerDeadline(t *testing.T) {
	client, _ := tcpPair(t)
	co := newCoalescer(client)
	co.commitLag(time.Minute)
	now := time.Now()
	far := now.Add(time.Minute)
	first := co.deadline(now, far)
	if !first.Equal(now.Add(coalesceLinger)) {
		t.Fatalf("first deadline %v, want now + linger", first.Sub(now))
	}
	if again := co.deadline(now.Add(coalesceLinger/2), far); !again.Equal(first) {
		t.Fatalf("the linger moved before it passed: %v", again.Sub(now))
	}
	later := now.Add(coalesceLinger)
	if next := co.deadline(later, far); !next.Equal(later.Add(coalesceLinger)) {
		t.Fatalf("the linger was not re-armed after it passed: %v", next.Sub(now))
	}
	soon := later.Add(time.Millisecond)
	if d := co.deadline(later, soon); !d.Equal(soon) {
		t.Fatalf("deadline %v past the status update due at %v", d.Sub(now), soon.Sub(now))
	}
}
