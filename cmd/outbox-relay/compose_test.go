package main

import (
	"context"
	"strings"
	"testing"

	compose "github.com/compose-spec/compose-go/v2/cli"
)

// TestComposeFile keeps docker-compose.yml valid (the Compose
// specification's own loader and schema) and in step with the contract:
// Postgres with wal_level=logical, NATS with JetStream and fsync on every
// write, the relay configured through its documented variables.
func TestComposeFile(t *testing.T) {
	opts, err := compose.NewProjectOptions([]string{"../../docker-compose.yml"}, compose.WithName("outbox-relay"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml is not a valid Compose file: %v", err)
	}
	svc := func(name string) (cmd string, env map[string]string) {
		s, ok := project.Services[name]
		if !ok {
			t.Fatalf("no %s service", name)
		}
		env = map[string]string{}
		for k, v := range s.Environment {
			if v != nil {
				env[k] = *v
			}
		}
		return strings.Join(s.Command, " "), env
	}
	if cmd, _ := svc("postgres"); !strings.Contains(cmd, "wal_level=logical") {
		t.Errorf("postgres command %q does not set wal_level=logical", cmd)
	}
	conf := project.Configs["nats_conf"].Content
	if !strings.Contains(conf, "jetstream") || !strings.Contains(conf, "sync_interval: always") {
		t.Errorf("nats config lacks JetStream with sync_interval: always:\n%s", conf)
	}
	cmd, env := svc("relay")
	if cmd != "run" || env["OUTBOX_PG_URL"] == "" || env["OUTBOX_NATS_URL"] == "" {
		t.Errorf("relay service: command %q, env %v", cmd, env)
	}
	if _, ok := project.Services["relay"].DependsOn["migrate"]; !ok {
		t.Error("relay does not wait for the migrations")
	}
	for k := range env {
		if !strings.HasPrefix(k, "OUTBOX_") {
			t.Errorf("relay variable %s is not one of the documented OUTBOX_ variables", k)
		}
	}
}
