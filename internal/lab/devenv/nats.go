package devenv

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSOptions configures StartNATS.
type NATSOptions struct {
	// StoreDir keeps JetStream's files; empty means a new temporary
	// directory, removed by Close.
	StoreDir string
	// Port to listen on; 0 picks a free one.
	Port int
	// MaxPayload overrides the server's max_payload (default 1 MiB).
	MaxPayload int32
	// SyncAlways fsyncs every write before acknowledging it.
	SyncAlways bool
	// BatchTimeout overrides how long the server keeps a batch without a
	// message (jetstream max_batch_timeout; 10 s by default).
	BatchTimeout time.Duration
}

// ServerOptions are the server's settings: JetStream on 127.0.0.1, no
// logging, no signal handlers. Every NATS server of the development
// environment, the benchmark and the tests starts from them; a caller may
// add to them (a cluster sets its name and routes).
func (o NATSOptions) ServerOptions() *server.Options {
	return &server.Options{
		ServerName: "outbox-relay-dev",
		Host:       "127.0.0.1",
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		MaxPayload: o.MaxPayload,
		SyncAlways: o.SyncAlways,
		NoLog:      true,
		NoSigs:     true,

		JetStreamLimits: server.JSLimitOpts{MaxBatchTimeout: o.BatchTimeout},
	}
}

// NATS is an embedded nats-server with JetStream on 127.0.0.1.
type NATS struct {
	opts    NATSOptions
	ownsDir bool
	srv     *server.Server
}

// StartNATS starts an embedded server and waits until it accepts clients.
func StartNATS(opts NATSOptions) (*NATS, error) {
	n := &NATS{opts: opts}
	if n.opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "outbox-relay-nats-")
		if err != nil {
			return nil, err
		}
		n.opts.StoreDir, n.ownsDir = dir, true
	}
	if n.opts.Port == 0 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		n.opts.Port = port
	}
	if err := n.Start(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Start starts the server (again) on the same port and store.
func (n *NATS) Start() error {
	if n.srv != nil && n.srv.Running() {
		return errors.New("nats server already running")
	}
	srv, err := ServeNATS(n.opts.ServerOptions())
	if err != nil {
		return err
	}
	n.srv = srv
	return nil
}

// ServeNATS starts an embedded server with opts and waits until it
// accepts clients; the caller shuts it down. Tests that need settings
// NATSOptions does not have (accounts, users) start theirs with it.
func ServeNATS(opts *server.Options) (*server.Server, error) {
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("configure nats server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("nats server did not become ready within 30s")
	}
	return srv, nil
}

// Stop shuts the server down; Start brings it back with its data.
func (n *NATS) Stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
}

// URL is the client URL.
func (n *NATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.opts.Port) }

// StoreDir is where JetStream keeps its files.
func (n *NATS) StoreDir() string { return n.opts.StoreDir }

// Close stops the server and removes a store directory it created.
func (n *NATS) Close() {
	n.Stop()
	if n.ownsDir {
		os.RemoveAll(n.opts.StoreDir)
	}
}
