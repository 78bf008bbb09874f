package main

import (
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/replication"
)

// TestNoConnString: every command that reads Postgres says the same when
// no connection string is given, with the fix (replication.ErrNoConnString).
func TestNoConnString(t *testing.T) {
	t.Parallel()
	bin := relaytest.Binary{Path: os.Args[0], Env: []string{"OUTBOX_RELAY_TEST_MAIN=1", "OUTBOX_PG_URL=", "OUTBOX_PG_URL_FILE="}}
	down := "--nats-url=nats://127.0.0.1:1"
	for _, args := range [][]string{
		{"run", down}, {"run", "--source", "poll", down}, {"migrate"}, {"status", down}, {"verify", down},
		{"doctor", down}, {"dlq", "list"}, {"dlq", "retry", "--all", down}, {"replay", "--since", "2026-01-01T00:00:00Z", "--dry-run", "--subject-prefix", "rebuild", down},
		{"cleanup", "--retention", "24h"},
	} {
		t.Run(strings.Join(args[:min(2, len(args))], " "), func(t *testing.T) {
			t.Parallel()
			out, errOut, code := bin.RunSplit(t, args...)
			if code == 0 || !strings.Contains(out+errOut, replication.ErrNoConnString.Error()) {
				t.Errorf("%v without --pg-url: exit %d, want the error with its fix (%q):\n%s%s", args, code, replication.ErrNoConnString, out, errOut)
			}
		})
	}
}

// TestHelpSaysWhatTheCommandDoes: only run, which creates the slot and the
// stream and derives a replication connection, says so in its help; every
// bool flag shows its default, and one that defaults to true can be
// turned off.
func TestHelpSaysWhatTheCommandDoes(t *testing.T) {
	var c cli
	p, err := kong.New(&c, kongOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range p.Model.Leaves(true) {
		path := node.FullPath()
		for _, f := range node.Flags {
			help := helpValue(f.Value)
			if node.Name != "run" {
				for _, claim := range []string{"created on first start", "created when missing", "replication connection is derived", "a stream the relay creates"} {
					if strings.Contains(help, claim) && !(node.Name == "doctor" && claim == "a stream the relay creates") && !strings.HasPrefix(f.Name, "stream-") {
						t.Errorf("%s --%s: help says %q: %s", path, f.Name, claim, help)
					}
				}
			}
			if f.IsBool() && f.Name != "help" && f.Name != "version" {
				if !strings.Contains(help, "(default: ") {
					t.Errorf("%s --%s: help shows no default: %s", path, f.Name, help)
				}
				if f.Default == "true" && f.Tag.Negatable == "" {
					t.Errorf("%s --%s defaults to true and cannot be turned off: make it negatable", path, f.Name)
				}
			}
		}
	}
}
