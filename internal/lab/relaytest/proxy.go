package relaytest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy between the relay and a server that a test can cut
// (connections reset at once, new ones refused) or blackhole (connections
// stay open but nothing passes, like a network partition that sends no
// reset).
type Proxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	mode     proxyMode
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

type proxyMode int

const (
	pass proxyMode = iota
	cut
	blackhole
)

// StartProxy listens on a free loopback port and forwards to upstream.
func StartProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Cut resets every connection and refuses new ones until Restore.
func (p *Proxy) Cut() { p.setMode(cut) }

// Blackhole stops all traffic, in both directions, without closing
// anything, until Restore; then it resets the stalled connections, as a
// healed partition with timed-out peers would. A peer that closes its end
// meanwhile tells the other nothing: only a relay that notices the
// silence by itself gives up on its connection before the heal.
func (p *Proxy) Blackhole() { p.setMode(blackhole) }

// Restore lets traffic pass again.
func (p *Proxy) Restore() { p.setMode(pass) }

func (p *Proxy) setMode(m proxyMode) {
	p.mu.Lock()
	prev := p.mode
	p.mode = m
	var drop []net.Conn
	if m == cut || (m == pass && prev == blackhole) {
		for c := range p.conns {
			drop = append(drop, c)
		}
	}
	p.mu.Unlock()
	for _, c := range drop {
		resetOnClose(c)
		c.Close()
	}
}

// resetOnClose makes closing c send RST, not FIN, like a peer that gave up.
func resetOnClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

func (p *Proxy) current() proxyMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.current() == cut {
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// pipe copies src to dst, holding data back while blackholed.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if (n > 0 || err != nil) && p.current() == blackhole {
			// Swallowed by the partition, as far as the peers can tell: the
			// bytes, and a close (FIN or reset) too, which a partition does
			// not deliver either, so a peer that gives up on its side (a
			// walsender past wal_sender_timeout) tells the other nothing.
			// TCP never delivers bytes after a gap, so this connection
			// carries nothing more: once healed it is reset (setMode), and
			// until then it holds back, never forwarding what comes after.
			p.holdWhileBlackholed()
			resetOnClose(src)
			resetOnClose(dst)
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// holdWhileBlackholed returns once the partition heals or the proxy closes.
func (p *Proxy) holdWhileBlackholed() {
	for p.current() == blackhole {
		time.Sleep(10 * time.Millisecond)
	}
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.setMode(cut)
	p.wg.Wait()
}
