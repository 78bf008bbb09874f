package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink"
)

// testSpec is the relay's stream on the default template.
func testSpec(t *testing.T, name string, settings StreamSettings) StreamSpec {
	t.Helper()
	tpl, err := sink.ParseTemplate(contract.DefaultSubject)
	if err != nil {
		t.Fatal(err)
	}
	return StreamSpec{Name: name, Template: tpl, DeadLetterSubject: contract.DefaultDeadLetterSubject, StreamSettings: settings}
}

// TestCreatedStreamSettings: a stream the relay creates has the settings
// it was given; without any, one file replica without limits that
// refuses new messages when full. Memory storage and discard old are
// created as asked, with the warning an existing stream with them gets.
func TestCreatedStreamSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name     string
		settings StreamSettings
		window   time.Duration
		want     natsjs.StreamConfig
		warn     []string
	}{
		{"DEFAULTS", StreamSettings{}, 0,
			natsjs.StreamConfig{Replicas: 1, Storage: natsjs.FileStorage, Discard: natsjs.DiscardNew, MaxBytes: -1, MaxMsgs: -1, Duplicates: DefaultDuplicateWindow}, nil},
		{"LIMITED", StreamSettings{MaxAge: 24 * time.Hour, MaxBytes: 10 << 20, MaxMsgs: 5000}, 5 * time.Minute,
			natsjs.StreamConfig{Replicas: 1, Storage: natsjs.FileStorage, Discard: natsjs.DiscardNew, MaxAge: 24 * time.Hour, MaxBytes: 10 << 20, MaxMsgs: 5000, Duplicates: 5 * time.Minute}, nil},
		{"MEMORY", StreamSettings{Storage: natsjs.MemoryStorage}, 0,
			natsjs.StreamConfig{Replicas: 1, Storage: natsjs.MemoryStorage, Discard: natsjs.DiscardNew, MaxBytes: -1, MaxMsgs: -1, Duplicates: DefaultDuplicateWindow},
			[]string{"memory storage"}},
		{"OLD", StreamSettings{MaxMsgs: 100, DiscardOld: true}, 0,
			natsjs.StreamConfig{Replicas: 1, Storage: natsjs.FileStorage, Discard: natsjs.DiscardOld, MaxBytes: -1, MaxMsgs: 100, Duplicates: DefaultDuplicateWindow},
			[]string{"discards old messages", "--discard new"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A server of its own: deleting an account's last stream
			// removes its directory in the background, and a stream
			// created meanwhile can fail with "error creating store for
			// stream" (nats-server 2.15.2: "mkdir …/jetstream/$G/streams:
			// no such file or directory").
			js, _ := startJetStream(t)
			var logs bytes.Buffer
			spec := testSpec(t, tc.name, tc.settings)
			spec.DuplicateWindow = tc.window
			if _, err := EnsureStream(ctx, js, spec, zerolog.New(&logs)); err != nil {
				t.Fatal(err)
			}
			stream, err := js.Stream(ctx, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			got := stream.CachedInfo().Config
			if got.Replicas != tc.want.Replicas || got.Storage != tc.want.Storage || got.Discard != tc.want.Discard ||
				got.MaxAge != tc.want.MaxAge || got.MaxBytes != tc.want.MaxBytes || got.MaxMsgs != tc.want.MaxMsgs ||
				got.Duplicates != tc.want.Duplicates || got.Retention != natsjs.LimitsPolicy {
				t.Errorf("created %+v\nwant replicas %d, %s, %s, max age %s, max bytes %d, max msgs %d, duplicates %s, limits retention",
					got, tc.want.Replicas, tc.want.Storage, tc.want.Discard, tc.want.MaxAge, tc.want.MaxBytes, tc.want.MaxMsgs, tc.want.Duplicates)
			}
			warned := strings.Count(logs.String(), `"level":"warn"`)
			if warned != min(len(tc.warn), 1) {
				t.Errorf("%d warnings, want %d:\n%s", warned, min(len(tc.warn), 1), logs.String())
			}
			for _, w := range tc.warn {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("log lacks %q:\n%s", w, logs.String())
				}
			}
		})
	}
}

// TestAdoptedStreamChecks: an existing stream is adopted as it is unless
// it cannot keep the promise: work-queue or interest retention (consumed
// messages vanish and would be published again), a mirror, a sealed
// stream, one without PubAcks. A per-subject limit and settings the
// stream lacks (--stream-*) are warnings.
func TestAdoptedStreamChecks(t *testing.T) {
	js, _ := startJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "ORIGIN", Subjects: []string{"origin.>"}}); err != nil {
		t.Fatal(err)
	}
	subjects := []string{"outbox.*.*", contract.DefaultDeadLetterSubject}
	for _, tc := range []struct {
		name     string
		cfg      natsjs.StreamConfig
		sealed   bool
		settings StreamSettings
		kind     string // the problem found, "" for none (a mirror has no subjects either)
		fatal    bool
	}{
		{name: "LIMITS", cfg: natsjs.StreamConfig{Subjects: subjects, MaxAge: time.Hour, Discard: natsjs.DiscardNew}},
		{name: "WORKQUEUE", cfg: natsjs.StreamConfig{Subjects: subjects, Retention: natsjs.WorkQueuePolicy}, kind: "retention", fatal: true},
		{name: "INTEREST", cfg: natsjs.StreamConfig{Subjects: subjects, Retention: natsjs.InterestPolicy}, kind: "retention", fatal: true},
		{name: "MIRROR", cfg: natsjs.StreamConfig{Mirror: &natsjs.StreamSource{Name: "ORIGIN"}}, kind: "mirror", fatal: true},
		{name: "SEALED", cfg: natsjs.StreamConfig{Subjects: subjects}, sealed: true, kind: "sealed", fatal: true},
		{name: "NOACK", cfg: natsjs.StreamConfig{Subjects: subjects, NoAck: true}, kind: "no_ack", fatal: true},
		{name: "PERSUBJECT", cfg: natsjs.StreamConfig{Subjects: subjects, MaxMsgsPerSubject: 10}, kind: "per_subject"},
		{name: "SETTINGS", cfg: natsjs.StreamConfig{Subjects: subjects},
			settings: StreamSettings{MaxAge: time.Hour, MaxMsgs: 1000}, kind: "settings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Name = tc.name
			if _, err := js.CreateStream(ctx, tc.cfg); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = js.DeleteStream(context.Background(), tc.name) })
			if tc.sealed {
				tc.cfg.Sealed = true
				if _, err := js.UpdateStream(ctx, tc.cfg); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			spec := testSpec(t, tc.name, tc.settings)
			if tc.name == "MIRROR" {
				spec.DeadLetterSubject = "origin.dead" // covered by ORIGIN: only the mirror is wrong
			}
			_, err := EnsureStream(ctx, js, spec, zerolog.New(&logs))
			switch {
			case tc.fatal && !errors.Is(err, ErrStreamConfig):
				t.Fatalf("adopted: EnsureStream = %v", err)
			case tc.fatal && !strings.Contains(err.Error(), "nats ") && !strings.Contains(err.Error(), "--stream"):
				t.Errorf("the error says no fix: %v", err)
			case !tc.fatal && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.fatal && tc.kind != "" && !strings.Contains(logs.String(), `"level":"warn"`):
				t.Errorf("no warning for %s:\n%s", tc.kind, logs.String())
			case tc.kind == "" && strings.Contains(logs.String(), `"level":"warn"`):
				t.Errorf("a warning for a stream that keeps the promise:\n%s", logs.String())
			}
			stream, err := js.Stream(ctx, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, p := range CheckStream(ctx, js, stream.CachedInfo().Config, spec) {
				kinds = append(kinds, p.Kind)
			}
			want := []string{tc.kind}
			if tc.kind == "mirror" {
				want = []string{"mirror", "subjects"}
			}
			if tc.kind == "" && len(kinds) > 0 || tc.kind != "" && fmt.Sprint(kinds) != fmt.Sprint(want) {
				t.Errorf("problems %v, want %v", kinds, want)
			}
		})
	}
}
