package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest/doctortest"
)

// TestDoctorStreamSettings: doctor judges the stream as run would: an
// existing one it cannot use (work-queue retention, a mirror's kin: no
// PubAcks) is an error; settings the stream lacks, a per-subject limit,
// are warnings; a missing one is described with the --stream-* settings
// it will be created with, and an impossible one (three replicas on a
// single server) is an error.
func TestDoctorStreamSettings(t *testing.T) {
	t.Parallel()
	existing := func(cfg jetstream.StreamConfig) func(t *testing.T, env *relaytest.Env) {
		return func(t *testing.T, env *relaytest.Env) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cfg.Name, cfg.Subjects, cfg.Duplicates, cfg.Discard = env.Stream, []string{"outbox.*.*", env.DeadSubj}, 2*time.Minute, jetstream.DiscardNew
			if _, err := env.JS.CreateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	none := func(*testing.T, *relaytest.Env) {}
	cases := []struct {
		name  string
		setup func(t *testing.T, env *relaytest.Env)
		flags []string
		check string
		sev   doctor.Severity
		exit  int
		want  []string // in the message or the fix
	}{
		{"work-queue retention", existing(jetstream.StreamConfig{Retention: jetstream.WorkQueuePolicy}), nil,
			"nats.stream_retention", doctor.Error, 1, []string{"work-queue retention", "--retention limits"}},
		{"no PubAcks", existing(jetstream.StreamConfig{NoAck: true}), nil,
			"nats.stream_no_ack", doctor.Error, 1, []string{"no-ack", "nats stream edit OUTBOX --no-ack=false"}},
		{"per-subject limit", existing(jetstream.StreamConfig{MaxMsgsPerSubject: 100}), nil,
			"nats.stream_per_subject", doctor.Warn, 0, []string{"at most 100 messages per subject", "--max-msgs-per-subject -1"}},
		{"settings the stream lacks", existing(jetstream.StreamConfig{}), []string{"--stream-max-age", "168h", "--stream-max-bytes", "1GiB"},
			"nats.stream_settings", doctor.Warn, 0, []string{"--stream-max-age 168h0m0s", "nats stream edit OUTBOX --max-age 168h0m0s --max-bytes 1073741824"}},
		{"to be created with limits", none, []string{"--stream-max-age", "168h", "--stream-max-msgs", "1000000"},
			"nats.stream", doctor.Info, 0, []string{"file storage, replicas 1, limits: max age 168h0m0s, max messages 1000000 (discard new)"}},
		{"to be created in memory", none, []string{"--stream-storage", "memory"},
			"nats.stream_storage", doctor.Warn, 0, []string{"memory storage", "--stream-storage file"}},
		{"three replicas on one server", none, []string{"--stream-replicas", "3"},
			"nats.replicas", doctor.Error, 1, []string{"a single server", "--stream-replicas 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := suite.NewEnv(t)
			tc.setup(t, env)
			rep, code, out := doctortest.Run(t, suite.Relay, env, tc.flags...)
			if code != tc.exit {
				t.Errorf("exit %d, want %d", code, tc.exit)
			}
			got := doctortest.FindingOf(rep, tc.check, tc.sev)
			if len(got) == 0 {
				t.Fatalf("no %s %s:\n%s", tc.sev, tc.check, out)
			}
			all, _ := json.Marshal(got)
			for _, w := range tc.want {
				if !strings.Contains(string(all), strings.ReplaceAll(strings.ReplaceAll(w, `"`, `\"`), ">", `\u003e`)) {
					t.Errorf("%s lacks %q:\n%s", tc.check, w, out)
				}
			}
		})
	}
}
