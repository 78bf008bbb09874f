package relaytest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-relay/outbox-relay/internal/devenv"
)

// NATSCluster is a JetStream cluster of embedded servers on loopback, each
// with devenv's server options plus its name and routes.
type NATSCluster struct {
	t       testing.TB
	opts    []*server.Options
	servers []*server.Server
}

// StartNATSCluster starts n clustered JetStream servers and waits until
// they elected a meta leader.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	c := &NATSCluster{t: t}
	clientPorts, routePorts := freePorts(t, n), freePorts(t, n)
	var routes []*url.URL
	for _, p := range routePorts {
		u, _ := url.Parse(fmt.Sprintf("nats://127.0.0.1:%d", p))
		routes = append(routes, u)
	}
	for i := 0; i < n; i++ {
		o := devenv.NATSOptions{Port: clientPorts[i], StoreDir: t.TempDir()}.ServerOptions()
		o.ServerName = fmt.Sprintf("n%d", i+1)
		o.Cluster = server.ClusterOpts{Name: "outbox-test", Host: "127.0.0.1", Port: routePorts[i]}
		o.Routes = routes
		c.opts = append(c.opts, o)
		c.servers = append(c.servers, nil)
	}
	for i := range c.opts {
		c.Start(i)
	}
	t.Cleanup(func() {
		for i := range c.servers {
			c.Stop(i)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range c.servers {
			if s != nil && s.JetStreamIsLeader() {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the NATS cluster elected no JetStream leader within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URLs lists the client URLs, comma-separated.
func (c *NATSCluster) URLs() string {
	var us []string
	for _, o := range c.opts {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(us, ",")
}

// Start starts server i (again, with its store).
func (c *NATSCluster) Start(i int) {
	c.t.Helper()
	s, err := server.NewServer(c.opts[i])
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		c.t.Fatalf("server %d not ready", i)
	}
	c.servers[i] = s
}

// Stop shuts server i down (as abruptly as an embedded server allows).
func (c *NATSCluster) Stop(i int) {
	if s := c.servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.servers[i] = nil
	}
}

// Index returns the index of the server named name, or -1.
func (c *NATSCluster) Index(name string) int {
	for i, o := range c.opts {
		if o.ServerName == name {
			return i
		}
	}
	return -1
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
