package relaytest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// NATSCluster is a JetStream cluster of nats-server processes on loopback,
// joined by routes. A node can be killed with SIGKILL, as a crash stops
// it (an embedded server's Shutdown is a graceful step-down instead), and
// started again on its store.
type NATSCluster struct {
	t     testing.TB
	exe   string
	nodes []*natsNode
}

// natsNode is one server of the cluster: its configuration file, client
// port, output, and the running process, if any.
type natsNode struct {
	name    string
	conf    string
	store   string
	cluster string // the cluster block, "" for a single server
	port    int
	out     *SyncBuffer
	cmd     *exec.Cmd
	done    chan struct{}
}

// clusterReadyTimeout bounds the wait for a cluster to serve JetStream
// (a meta leader elected) and for a node to listen; -race and two shared
// cores make both slow.
const clusterReadyTimeout = time.Minute

// NATSClusterOptions shape a NATSCluster.
type NATSClusterOptions struct {
	Nodes int
	// NoAdvertise keeps the servers from telling clients the other nodes'
	// addresses, so that a client given only proxies' addresses stays
	// behind them (a client otherwise adds the advertised ones and
	// reconnects to them directly).
	NoAdvertise bool
	// NoRace builds nats-server without the race detector even when this
	// binary has it: nats-server is not what the tests check, and under
	// the detector three servers replicating thousands of messages a
	// second take most of a two-core machine.
	NoRace bool
	// Conf is added to every node's configuration.
	Conf NATSConf
}

// StartNATSCluster builds nats-server from the module's own nats-server
// dependency (with -race when this binary has it, so that the build
// cache serves it), starts n nodes and waits until the cluster elected a
// JetStream meta leader. The nodes are killed when the test ends.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	return StartNATSClusterWith(t, NATSClusterOptions{Nodes: n})
}

// NATSConf is what a test adds to each server's configuration: lines in
// its jetstream block (max_file_store) and top-level lines (accounts).
type NATSConf struct {
	JetStream string
	TopLevel  string
}

// StartNATSClusterWith is StartNATSCluster with options; with one node
// the server is a single server, no cluster.
func StartNATSClusterWith(t testing.TB, opts NATSClusterOptions) *NATSCluster {
	t.Helper()
	n, conf := opts.Nodes, opts.Conf
	c := &NATSCluster{t: t, exe: buildNATSServer(t, raceEnabled && !opts.NoRace)}
	// One call: ports freed by a first call could come back in a second.
	ports := freePorts(t, 2*n)
	clientPorts, routePorts := ports[:n], ports[n:]
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", p)))
	}
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		node := &natsNode{name: fmt.Sprintf("n%d", i+1), port: clientPorts[i], out: &SyncBuffer{}}
		node.conf = filepath.Join(dir, node.name+".conf")
		node.store = filepath.Join(dir, node.name+"-store")
		if n > 1 {
			node.cluster = fmt.Sprintf(`cluster {
  name: "outbox-test"
  listen: "127.0.0.1:%d"
  routes: [%s]
  no_advertise: %t
}
`, routePorts[i], strings.Join(routes, ", "), opts.NoAdvertise)
		}
		node.write(t, conf)
		c.nodes = append(c.nodes, node)
	}
	t.Cleanup(func() {
		for i, node := range c.nodes {
			c.Kill(i)
			if t.Failed() {
				t.Logf("nats-server %s output:\n%s", node.name, tail(node.out.String(), 30))
			}
		}
	})
	for i := range c.nodes {
		c.Start(i)
	}
	c.waitJetStream()
	return c
}

// write writes the node's configuration file with conf added.
func (node *natsNode) write(t testing.TB, conf NATSConf) {
	t.Helper()
	text := fmt.Sprintf(`server_name: %q
listen: "127.0.0.1:%d"
jetstream {
  store_dir: %q
%s
}
%s%s
`, node.name, node.port, node.store, conf.JetStream, node.cluster, conf.TopLevel)
	if err := os.WriteFile(node.conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Reconfigure rewrites node i's configuration with conf added (instead of
// what was added before) and has the running server reload it (SIGHUP),
// as an operator raises a limit; it waits until the server says it
// reloaded.
func (c *NATSCluster) Reconfigure(i int, conf NATSConf) {
	c.t.Helper()
	node := c.nodes[i]
	node.write(c.t, conf)
	if node.cmd == nil {
		return // read at the next Start
	}
	const reloaded = "Reloaded server configuration"
	before := strings.Count(node.out.String(), reloaded)
	_ = node.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(clusterReadyTimeout)
	for strings.Count(node.out.String(), reloaded) == before {
		if time.Now().After(deadline) {
			c.t.Fatalf("nats-server %s did not reload its configuration within %s:\n%s", node.name, clusterReadyTimeout, tail(node.out.String(), 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// buildNATSServer builds the nats-server command of the module's
// nats-server dependency into a temporary directory.
func buildNATSServer(t testing.TB, race bool) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "nats-server")
	args := []string{"build", "-o", exe}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "github.com/nats-io/nats-server/v2")
	started := time.Now()
	if out, err := exec.Command(goTool(), args...).CombinedOutput(); err != nil {
		t.Fatalf("build nats-server (go %s): %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("built nats-server in %s", time.Since(started).Round(time.Millisecond))
	return exe
}

// waitJetStream waits until the cluster answers JetStream requests.
func (c *NATSCluster) waitJetStream() {
	c.t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		c.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the NATS cluster serves no JetStream after %s: %v", clusterReadyTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// URLs lists the client URLs, comma-separated.
func (c *NATSCluster) URLs() string {
	var us []string
	for _, node := range c.nodes {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", node.port))
	}
	return strings.Join(us, ",")
}

// Start starts node i (again, on its store) and waits until it listens.
func (c *NATSCluster) Start(i int) {
	c.t.Helper()
	node := c.nodes[i]
	if node.cmd != nil {
		c.t.Fatalf("nats-server %s is already running", node.name)
	}
	cmd := exec.Command(c.exe, "-c", node.conf)
	cmd.Stdout, cmd.Stderr = node.out, node.out
	devenv.DiesWithParent(cmd)
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start nats-server %s: %v", node.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	node.cmd, node.done = cmd, done
	addr := fmt.Sprintf("127.0.0.1:%d", node.port)
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return
		}
		select {
		case <-done:
			node.cmd = nil
			c.t.Fatalf("nats-server %s exited before listening on %s:\n%s", node.name, addr, tail(node.out.String(), 30))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("nats-server %s does not listen on %s after %s", node.name, addr, clusterReadyTimeout)
		}
	}
}

// Kill sends SIGKILL to node i and waits for the process to end.
func (c *NATSCluster) Kill(i int) { c.signal(i, syscall.SIGKILL) }

// Stop sends SIGTERM to node i (the server shuts down cleanly) and waits
// up to timeout for the process to end; then it kills it and says so.
func (c *NATSCluster) Stop(i int, timeout time.Duration) error {
	node := c.nodes[i]
	if node.cmd == nil {
		return nil
	}
	_ = node.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-node.done:
		node.cmd = nil
		return nil
	case <-time.After(timeout):
		c.Kill(i)
		return fmt.Errorf("nats-server %s did not exit within %s of SIGTERM; killed it", node.name, timeout)
	}
}

// Len is the number of nodes.
func (c *NATSCluster) Len() int { return len(c.nodes) }

// Addr is node i's client address (host:port).
func (c *NATSCluster) Addr(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.nodes[i].port) }

// Name is node i's server name (what stream info calls its leader).
func (c *NATSCluster) Name(i int) string { return c.nodes[i].name }

// Output is what node i wrote so far.
func (c *NATSCluster) Output(i int) string { return c.nodes[i].out.String() }

func (c *NATSCluster) signal(i int, sig syscall.Signal) {
	node := c.nodes[i]
	if node.cmd == nil {
		return
	}
	_ = node.cmd.Process.Signal(sig)
	<-node.done
	node.cmd = nil
}

// Index returns the index of the node named name, or -1.
func (c *NATSCluster) Index(name string) int {
	for i, node := range c.nodes {
		if node.name == name {
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
