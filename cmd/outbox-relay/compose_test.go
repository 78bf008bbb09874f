package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	compose "github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// TestComposeFile keeps docker-compose.yml valid (the Compose
// specification's own loader and schema) and in step with the contract:
// Postgres with wal_level=logical, NATS with JetStream and fsync on every
// write, the relay configured through its documented variables, running as
// the least-privilege role with its password in a secret file, one image
// for the relay, the migrations and the example service, a healthcheck on
// every long-running service and start-up ordered on them. Docker is not
// needed: this parses only.
func TestComposeFile(t *testing.T) {
	opts, err := compose.NewProjectOptions([]string{"../../docker-compose.yml"}, compose.WithName("outbox-relay"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml is not a valid Compose file: %v", err)
	}
	svc := func(name string) types.ServiceConfig {
		s, ok := project.Services[name]
		if !ok {
			t.Fatalf("no %s service", name)
		}
		return s
	}
	env := func(s types.ServiceConfig) map[string]string {
		m := map[string]string{}
		for k, v := range s.Environment {
			if v != nil {
				m[k] = *v
			}
		}
		return m
	}
	if cmd := strings.Join(svc("postgres").Command, " "); !strings.Contains(cmd, "wal_level=logical") {
		t.Errorf("postgres command %q does not set wal_level=logical", cmd)
	}
	conf := project.Configs["nats_conf"].Content
	if !strings.Contains(conf, "jetstream") || !strings.Contains(conf, "sync_interval: always") {
		t.Errorf("nats config lacks JetStream with sync_interval: always:\n%s", conf)
	}

	// Healthchecks: Postgres over TCP (its init phase listens on the socket
	// only), the others by their own means.
	for _, name := range []string{"postgres", "nats", "relay", "orders"} {
		hc := svc(name).HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) < 2 {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	if pg := strings.Join(svc("postgres").HealthCheck.Test, " "); !strings.Contains(pg, "pg_isready -h 127.0.0.1") {
		t.Errorf("postgres healthcheck %q does not ask over TCP (pg_isready -h)", pg)
	}
	if test := svc("relay").HealthCheck.Test; !slices.Equal(test, []string{"CMD", "/outbox-relay", "healthcheck"}) {
		t.Errorf("relay healthcheck %q: want the image's own `/outbox-relay healthcheck` (no shell in distroless)", test)
	}

	// Start-up order: on healthy servers and finished migrations.
	wantDeps := map[string]map[string]string{
		"migrate": {"postgres": types.ServiceConditionHealthy},
		"relay":   {"postgres": types.ServiceConditionHealthy, "nats": types.ServiceConditionHealthy, "migrate": types.ServiceConditionCompletedSuccessfully},
		"orders":  {"postgres": types.ServiceConditionHealthy, "nats": types.ServiceConditionHealthy, "migrate": types.ServiceConditionCompletedSuccessfully, "relay": types.ServiceConditionHealthy},
	}
	for name, deps := range wantDeps {
		for dep, cond := range deps {
			if got := svc(name).DependsOn[dep].Condition; got != cond {
				t.Errorf("%s depends on %s with condition %q, want %q", name, dep, got, cond)
			}
		}
	}

	// One image for the relay, the migrations and the example service.
	image := svc("relay").Image
	for _, name := range []string{"migrate", "relay", "orders"} {
		if s := svc(name); s.Image != image || s.Build == nil {
			t.Errorf("%s: image %q (build %v), want the relay's %q built here", name, s.Image, s.Build != nil, image)
		}
	}
	if ep := svc("orders").Entrypoint; !slices.Equal(ep, []string{"/orders"}) {
		t.Errorf("orders entrypoint %q, want the example binary of the image", ep)
	}

	// The relay: documented variables only, no password in them, the
	// connection string from a secret file naming the least-privilege role
	// that migrate grants and Postgres's init script creates.
	relayEnv := env(svc("relay"))
	if cmd := strings.Join(svc("relay").Command, " "); cmd != "run" || relayEnv["OUTBOX_NATS_URL"] == "" {
		t.Errorf("relay service: command %q, env %v", cmd, relayEnv)
	}
	for k, v := range relayEnv {
		if !strings.HasPrefix(k, "OUTBOX_") {
			t.Errorf("relay variable %s is not one of the documented OUTBOX_ variables", k)
		}
		if strings.Contains(v, "@") {
			t.Errorf("relay variable %s holds credentials: use a secret file", k)
		}
	}
	relayURL := secretURL(t, project, svc("relay"), relayEnv["OUTBOX_PG_URL_FILE"])
	const role = "outbox_relay"
	if relayURL.User.Username() != role {
		t.Errorf("the relay connects as %q, want the least-privilege role %q", relayURL.User.Username(), role)
	}
	if cmd := strings.Join(svc("migrate").Command, " "); !strings.Contains(cmd, "--relay-role "+role) {
		t.Errorf("migrate command %q does not grant the relay's role %s", cmd, role)
	}
	if s := project.Configs["relay_role"].Content; !strings.Contains(s, "CREATE ROLE "+role+" LOGIN REPLICATION PASSWORD") {
		t.Errorf("postgres's init script does not create %s with a password:\n%s", role, s)
	}
	pw, err := os.ReadFile(filepath.Join("../..", "deploy/compose/secrets/relay_password"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := relayURL.User.Password(); got != strings.TrimSpace(string(pw)) {
		t.Error("the relay's connection string and relay_password disagree")
	}
	appURL := secretURL(t, project, svc("migrate"), env(svc("migrate"))["OUTBOX_PG_URL_FILE"])
	if appURL.User.Username() == role {
		t.Error("migrate runs as the relay's role: it must run as the database owner")
	}
}

// secretURL reads the connection string a service finds in file, one of
// its secrets (/run/secrets/NAME), from the file the project mounts there.
func secretURL(t *testing.T, project *types.Project, s types.ServiceConfig, file string) *url.URL {
	t.Helper()
	name, ok := strings.CutPrefix(file, "/run/secrets/")
	if !ok || !slices.ContainsFunc(s.Secrets, func(r types.ServiceSecretConfig) bool { return r.Source == name }) {
		t.Fatalf("%s reads %q, not one of its secrets", s.Name, file)
	}
	raw, err := os.ReadFile(project.Secrets[name].File)
	if err != nil {
		t.Fatalf("secret %s: %v", name, err)
	}
	u, err := url.Parse(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("secret %s: %v", name, err)
	}
	return u
}
