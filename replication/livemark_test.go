package replication

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// The live mark holds from goLive until stop, gives way to the coalescing
// mark while coalescing, and comes back when coalescing stops.
func TestLiveMarkSwitches(t *testing.T) {
	client, _ := tcpPair(t)
	co := newCoalescer(client)
	rcvbuf := sockopt(t, client, syscall.SO_RCVBUF)
	check := func(step string, want int) {
		t.Helper()
		if got := sockopt(t, client, syscall.SO_RCVLOWAT); got != want {
			t.Fatalf("%s: SO_RCVLOWAT %d, want %d", step, got, want)
		}
	}
	check("new", 1)
	co.goLive()
	check("live", liveBytes)
	co.commitLag(time.Minute)
	check("coalescing", min(coalesceBytes, rcvbuf/4))
	co.off()
	check("coalescing off", liveBytes)
	co.stop()
	check("stopped", 1)
	co.goLive()
	co.commitLag(time.Minute)
	co.stop()
	check("stopped while coalescing", 1)
}

// Under the live mark, what arrives between two events (a COMMIT, a
// keepalive and the next BEGIN: 130 bytes) does not wake a waiting
// reader; a change does, at once. The first half fails with a mark of
// one byte, the second with a mark above a BEGIN and a small INSERT.
func TestLiveMarkWakesForChanges(t *testing.T) {
	client, server := tcpPair(t)
	co := newCoalescer(client)
	co.goLive()
	buf := make([]byte, 4096)
	// Between two events: the reader waits until its deadline.
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = server.Write(make([]byte, 56+23+51))
	}()
	if err := client.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := client.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a COMMIT, keepalive and BEGIN (130 bytes) woke the reader: read %d bytes, %v", n, err)
	}
	// A read still takes what is there: the mark only delays the wake-up.
	if err := client.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := client.Read(buf); err != nil || n != 130 {
		t.Fatalf("read %d bytes, %v; want the 130 waiting", n, err)
	}
	// A BEGIN and an INSERT of an outbox row (the smallest is over 130
	// bytes) on top: the reader wakes long before its deadline.
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = server.Write(make([]byte, 51+140))
	}()
	if err := client.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err = client.Read(buf)
	if err != nil || n != 51+140 {
		t.Fatalf("read %d bytes, %v; want %d", n, err, 51+140)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a change took %s to wake the reader", took)
	}
}

// The live mark's linger counts from the last message read and never
// passes the next status update; once it passed, only the status update
// is waited for. A deadline armed already stays while it is at least half
// a linger after the last read.
func TestLiveMarkDeadline(t *testing.T) {
	client, _ := tcpPair(t)
	co := newCoalescer(client)
	now := time.Now()
	far := now.Add(time.Minute)
	if d := co.liveDeadline(now, now, far, time.Time{}); !d.Equal(far) {
		t.Fatalf("before goLive: deadline in %v, want the status update's", d.Sub(now))
	}
	co.goLive()
	last := now.Add(-5 * time.Millisecond)
	if d := co.liveDeadline(now, last, far, time.Time{}); !d.Equal(last.Add(liveLinger)) {
		t.Fatalf("deadline in %v, want the linger after the last read", d.Sub(now))
	}
	if d := co.liveDeadline(now, now.Add(-liveLinger), far, time.Time{}); !d.Equal(far) {
		t.Fatalf("linger passed: deadline in %v, want the status update's", d.Sub(now))
	}
	soon := now.Add(time.Millisecond)
	if d := co.liveDeadline(now, now, soon, time.Time{}); !d.Equal(soon) {
		t.Fatalf("deadline in %v, past the status update due in %v", d.Sub(now), soon.Sub(now))
	}
	armed := last.Add(liveLinger)
	for _, read := range []time.Duration{time.Millisecond, liveLinger / 2} {
		if d := co.liveDeadline(now, last.Add(read), far, armed); !d.Equal(armed) {
			t.Fatalf("a read %v after the last moved the deadline armed %v after it to %v", read, liveLinger, d.Sub(last))
		}
	}
	later := last.Add(liveLinger/2 + time.Millisecond)
	if d := co.liveDeadline(now, later, far, armed); !d.Equal(later.Add(liveLinger)) {
		t.Fatalf("deadline %v after the last read, want the linger after it: the armed one is under half a linger after it", d.Sub(later))
	}
}
