package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// healthcheckCmd asks a running relay (or the example service) for its
// health over HTTP, for container healthchecks: the distroless image has
// no shell, curl or wget.
type healthcheckCmd struct {
	MetricsAddr string        `name:"metrics-addr" env:"OUTBOX_METRICS_ADDR" default:"${metrics_addr}" help:"The relay's --metrics-addr; a wildcard host (0.0.0.0, ::, none) is asked on loopback."`
	Live        bool          `name:"live" help:"Ask /healthz (the process serves) instead of /readyz (streaming, or a healthy standby)."`
	URL         string        `name:"url" help:"GET this URL instead (another service's health endpoint); overrides --metrics-addr and --live."`
	Timeout     time.Duration `name:"timeout" default:"3s" help:"How long to wait for the answer."`
}

func (c *healthcheckCmd) Run(ctx context.Context) error {
	url := c.URL
	if url == "" {
		path := "/readyz"
		if c.Live {
			path = "/healthz"
		}
		addr, err := loopbackAddr(c.MetricsAddr)
		if err != nil {
			return err
		}
		url = "http://" + addr + path
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Print(string(body))
	return nil
}

// loopbackAddr turns a listen address into one to connect to: a wildcard
// or missing host becomes loopback.
func loopbackAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" || port == "0" {
		return "", fmt.Errorf("--metrics-addr %q: want host:port with a fixed port (the relay's --metrics-addr)", listen)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::", "[::]":
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}
