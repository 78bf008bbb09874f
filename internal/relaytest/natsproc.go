package relaytest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// natsProcessEnv carries a NATSProcess's settings to the child.
const natsProcessEnv = "OUTBOX_TEST_NATS_SERVER"

// natsProcessConfig is what the child needs to run a server.
type natsProcessConfig struct {
	Port       int    `json:"port"`
	StoreDir   string `json:"store_dir"`
	SyncAlways bool   `json:"sync_always"`
}

// ServeNATSIfAsked turns a re-executed test binary into a nats-server
// process (see StartNATSProcess). Call it first thing in TestMain; it does
// not return in the child.
func ServeNATSIfAsked() {
	raw := os.Getenv(natsProcessEnv)
	if raw == "" {
		return
	}
	var cfg natsProcessConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: cfg.Port, JetStream: true,
		StoreDir: cfg.StoreDir, SyncAlways: cfg.SyncAlways, NoSigs: true, NoLog: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "nats server not ready")
		os.Exit(2)
	}
	fmt.Println("nats ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	srv.Shutdown()
	srv.WaitForShutdown()
	os.Exit(0)
}

// NATSProcess is a nats-server with JetStream in a child process, so a test
// can kill it with SIGKILL and start it again on the same store.
type NATSProcess struct {
	t   testing.TB
	bin Binary
	cfg natsProcessConfig
	cmd *exec.Cmd
}

// StartNATSProcess starts the server; bin is the test binary (its TestMain
// calls ServeNATSIfAsked).
func StartNATSProcess(t testing.TB, bin Binary, syncAlways bool) *NATSProcess {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	n := &NATSProcess{t: t, bin: bin, cfg: natsProcessConfig{Port: port, StoreDir: t.TempDir(), SyncAlways: syncAlways}}
	n.Start()
	t.Cleanup(n.Kill)
	return n
}

// URL is the client URL.
func (n *NATSProcess) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.cfg.Port) }

// Start starts the server process (again) and waits until it serves.
func (n *NATSProcess) Start() {
	n.t.Helper()
	raw, _ := json.Marshal(n.cfg)
	n.cmd = exec.Command(n.bin.Path, "-test.run=^$")
	n.cmd.Env = append(os.Environ(), natsProcessEnv+"="+string(raw))
	n.cmd.Stderr = os.Stderr
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", n.cfg.Port))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("nats process did not listen on %d", n.cfg.Port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (n *NATSProcess) Kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}
