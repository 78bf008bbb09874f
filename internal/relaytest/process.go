package relaytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary is how tests start the relay: a program and the environment that
// makes it behave as `outbox-relay` (a test binary re-executing itself, or
// a built binary).
type Binary struct {
	Path string
	Env  []string
}

// Relay is a relay child process.
type Relay struct {
	t    testing.TB
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
	err  error
}

// StartRelay starts `outbox-relay args...`; it is killed when the test ends.
func StartRelay(t testing.TB, bin Binary, args ...string) *Relay {
	t.Helper()
	r := &Relay{t: t, logs: &syncBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(bin.Path, args...)
	r.cmd.Env = append(os.Environ(), bin.Env...)
	r.cmd.Stdout = r.logs
	r.cmd.Stderr = r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start relay: %v", err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		r.Kill()
		if t.Failed() {
			t.Logf("relay pid %d log:\n%s", r.cmd.Process.Pid, tail(r.Logs(), 60))
		}
	})
	return r
}

// Pid is the process id.
func (r *Relay) Pid() int { return r.cmd.Process.Pid }

// Kill sends SIGKILL and waits for the process to end.
func (r *Relay) Kill() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
}

// Term sends SIGTERM.
func (r *Relay) Term() { _ = r.cmd.Process.Signal(syscall.SIGTERM) }

// Wait waits for the process to exit and returns its exit code.
func (r *Relay) Wait(timeout time.Duration) int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.t.Fatalf("relay did not exit within %s; log:\n%s", timeout, tail(r.Logs(), 40))
	}
	if r.err == nil {
		return 0
	}
	if ee, ok := r.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// Exited reports whether the process has ended.
func (r *Relay) Exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Logs returns everything the relay wrote so far.
func (r *Relay) Logs() string { return r.logs.String() }

// WaitLog waits until the log contains substr.
func (r *Relay) WaitLog(substr string, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(r.Logs(), substr) {
		if time.Now().After(deadline) {
			r.t.Fatalf("relay log has no %q after %s; log:\n%s", substr, timeout, tail(r.Logs(), 40))
		}
		if r.Exited() && !strings.Contains(r.Logs(), substr) {
			r.t.Fatalf("relay exited (%v) without logging %q; log:\n%s", r.err, substr, tail(r.Logs(), 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = append([]string{fmt.Sprintf("… %d earlier lines", len(parts)-lines)}, parts[len(parts)-lines:]...)
	}
	return strings.Join(parts, "\n")
}
