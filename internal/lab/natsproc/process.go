package natsproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// Options configures Start.
type Options struct {
	// Exe is the program to run; its main calls ServeIfAsked first thing.
	// Empty means this program (os.Executable).
	Exe string
	// Args are passed to the program. A test binary passes -test.run=^$,
	// so that it runs no tests should its TestMain not serve.
	Args []string
	// Server is the server's settings. StoreDir is required: a restarted
	// server finds its streams there. Port 0 picks a free port, kept
	// across restarts.
	Server devenv.NATSOptions
	// Output receives the process's stdout and stderr; nil discards them.
	Output io.Writer
}

// readyTimeout bounds the wait for a (re)started server to listen.
const readyTimeout = 30 * time.Second

// stopTimeout is how long Stop waits after SIGTERM before SIGKILL.
const stopTimeout = 30 * time.Second

// Process is a nats-server child process.
type Process struct {
	opts Options
	env  string // envVar=JSON options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error // the running process's exit; nil when none runs
}

// Start starts the server process and waits until it accepts connections;
// ctx bounds that wait only, not the process's life.
func Start(ctx context.Context, opts Options) (*Process, error) {
	if opts.Server.StoreDir == "" {
		return nil, errors.New("nats-server process: a store directory is required")
	}
	if opts.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("nats-server process: %w", err)
		}
		opts.Exe = exe
	}
	if opts.Server.Port == 0 {
		port, err := devenv.FreePort()
		if err != nil {
			return nil, fmt.Errorf("nats-server process: %w", err)
		}
		opts.Server.Port = port
	}
	raw, err := json.Marshal(opts.Server)
	if err != nil {
		return nil, err
	}
	p := &Process{opts: opts, env: envVar + "=" + string(raw)}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// URL is the client URL; it stays the same across restarts.
func (p *Process) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.opts.Server.Port) }

// PID is the running process's id, 0 when none runs.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Stop sends SIGTERM and waits for the process to end (SIGKILL after 30s);
// the server shuts down cleanly. It returns the exit error, if any.
func (p *Process) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-p.done:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		err = <-p.done
	}
	p.done = nil
	if err != nil {
		return fmt.Errorf("nats-server process: %w", err)
	}
	return nil
}

// Kill sends SIGKILL and waits for the process to end: the server stops
// as a crash would stop it.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.done = nil
}

// Restart starts the server again on the same port and store, after Stop
// or Kill (a running server is stopped first), and waits until it accepts
// connections.
func (p *Process) Restart(ctx context.Context) error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.start(ctx)
}

// start runs the process and waits until it listens.
func (p *Process) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.opts.Exe, p.opts.Args...)
	cmd.Env = append(os.Environ(), p.env)
	cmd.Stdout, cmd.Stderr = p.opts.Output, p.opts.Output
	devenv.DiesWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("nats-server process: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	p.cmd, p.done = cmd, done
	addr := fmt.Sprintf("127.0.0.1:%d", p.opts.Server.Port)
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return nil
		}
		select {
		case err := <-done:
			p.done = nil
			return fmt.Errorf("nats-server process exited before listening on %s: %v", addr, err)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			p.done = nil
			return fmt.Errorf("nats-server process did not listen on %s: %w", addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
