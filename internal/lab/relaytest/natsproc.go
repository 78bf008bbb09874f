package relaytest

import (
	"os"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/natsproc"
)

// ServeNATSIfAsked turns a re-executed test binary into a nats-server
// process (see StartNATSProcess). Call it first thing in TestMain; it does
// not return in the child.
func ServeNATSIfAsked() { natsproc.ServeIfAsked() }

// NATSProcess is a nats-server with JetStream in a child process, so a test
// can kill it with SIGKILL and start it again on the same store.
type NATSProcess struct {
	t testing.TB
	p *natsproc.Process
}

// StartNATSProcess starts the server; bin is the test binary (its TestMain
// calls ServeNATSIfAsked). The process is killed when the test ends.
func StartNATSProcess(t testing.TB, bin Binary, syncAlways bool) *NATSProcess {
	t.Helper()
	p, err := natsproc.Start(t.Context(), natsproc.Options{
		Exe: bin.Path, Args: []string{"-test.run=^$"}, Output: os.Stderr,
		Server: devenv.NATSOptions{StoreDir: t.TempDir(), SyncAlways: syncAlways},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return &NATSProcess{t: t, p: p}
}

// URL is the client URL.
func (n *NATSProcess) URL() string { return n.p.URL() }

// Start starts the server process again (after Kill) and waits until it
// serves.
func (n *NATSProcess) Start() {
	n.t.Helper()
	if err := n.p.Restart(n.t.Context()); err != nil {
		n.t.Fatal(err)
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (n *NATSProcess) Kill() { n.p.Kill() }
