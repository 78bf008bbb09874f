package natsproc_test

import (
	"os"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/natsproc"
)

func TestMain(m *testing.M) {
	natsproc.ServeIfAsked()
	os.Exit(m.Run())
}

// TestKillRestart: a stream created before a SIGKILL is there after the
// restart, on the same URL; Stop ends the process cleanly.
func TestKillRestart(t *testing.T) {
	p, err := natsproc.Start(t.Context(), natsproc.Options{Args: []string{"-test.run=^$"},
		Server: devenv.NATSOptions{StoreDir: t.TempDir(), SyncAlways: true}, Output: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if p.PID() == 0 || p.PID() == os.Getpid() {
		t.Fatalf("PID = %d", p.PID())
	}
	js := connect(t, p.URL())
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "kept", []byte("x")); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if p.PID() != 0 {
		t.Errorf("PID after Kill = %d", p.PID())
	}
	if err := p.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	st, err := connect(t, p.URL()).Stream(t.Context(), "KEPT")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("stream holds %d messages after restart, want 1", n)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// TestStoreRequired: a server without a store could not be restarted.
func TestStoreRequired(t *testing.T) {
	if _, err := natsproc.Start(t.Context(), natsproc.Options{}); err == nil {
		t.Fatal("Start without a store directory succeeded")
	}
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
