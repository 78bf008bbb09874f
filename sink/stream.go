package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// DefaultStream is the stream the relay publishes to unless told otherwise;
// StreamSpec.Name itself is required.
const DefaultStream = "OUTBOX"

// DefaultDuplicateWindow is the dedup window of a stream the relay creates
// when StreamSpec.DuplicateWindow is zero. Republished messages keep their
// Nats-Msg-Id: within the window JetStream drops the copies it has.
const DefaultDuplicateWindow = 2 * time.Minute

// StreamSpec describes the stream the relay publishes to.
type StreamSpec struct {
	Name string
	// Template is the subject template; the stream must cover its Filter.
	Template Template
	// DeadLetterSubject must be covered by this stream or another one.
	DeadLetterSubject string
	// DuplicateWindow is the dedup window of a stream the relay creates
	// (DefaultDuplicateWindow when zero).
	DuplicateWindow time.Duration
	// Replicas is the replica count of a stream the relay creates (default 1).
	Replicas int
}

// ErrStreamConfig marks a stream that exists but cannot be used as it is.
// The relay never changes an operator's stream; the error says what to do.
var ErrStreamConfig = errors.New("stream configuration does not fit the relay")

// EnsureStream creates the stream when it is missing: file storage, its
// subjects the template's filter and the dead-letter subject. An existing
// stream is adopted as it is when it covers the template; it is never
// changed. It returns the stream's configuration.
func EnsureStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec, log zerolog.Logger) (jetstream.StreamConfig, error) {
	if err := checkStreamName(spec.Name); err != nil {
		return jetstream.StreamConfig{}, err
	}
	filter := spec.Template.Filter()
	stream, err := js.Stream(ctx, spec.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return createStream(ctx, js, spec, log)
	case err != nil:
		return jetstream.StreamConfig{}, fmt.Errorf("look up stream %q: %w", spec.Name, err)
	}
	cfg := stream.CachedInfo().Config
	if !coveredBy(cfg.Subjects, filter) {
		return cfg, fmt.Errorf("%w: stream %q has subjects %v, which do not cover %q rendered from the subject template %q: add the subject to the stream (nats stream edit %s --subjects ...) or change the template",
			ErrStreamConfig, spec.Name, cfg.Subjects, filter, spec.Template, spec.Name)
	}
	if !coveredBy(cfg.Subjects, spec.DeadLetterSubject) {
		other, err := js.StreamNameBySubject(ctx, spec.DeadLetterSubject)
		if err != nil || other == "" {
			return cfg, fmt.Errorf("%w: no stream covers the dead-letter subject %q (stream %q has %v): add it to a stream or choose another dead-letter subject",
				ErrStreamConfig, spec.DeadLetterSubject, spec.Name, cfg.Subjects)
		}
	}
	if cfg.Storage == jetstream.MemoryStorage {
		log.Warn().Str("stream", spec.Name).Msg("stream uses memory storage: its events are lost when NATS restarts; use file storage")
	}
	if cfg.Discard == jetstream.DiscardOld && (cfg.MaxMsgs > 0 || cfg.MaxBytes > 0 || cfg.MaxAge > 0) {
		log.Warn().Str("stream", spec.Name).Msg("stream discards old messages at its limits: consumers that fall behind lose events; discard=new makes the relay wait instead")
	}
	log.Info().Str("stream", spec.Name).Strs("subjects", cfg.Subjects).Dur("duplicate_window", cfg.Duplicates).
		Msg("using existing stream as it is")
	return cfg, nil
}

func createStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec, log zerolog.Logger) (jetstream.StreamConfig, error) {
	cfg := jetstream.StreamConfig{
		Name:        spec.Name,
		Description: "Outbox events published by outbox-relay",
		Subjects:    []string{spec.Template.Filter(), spec.DeadLetterSubject},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Duplicates:  cmp.Or(spec.DuplicateWindow, DefaultDuplicateWindow),
		Replicas:    max(spec.Replicas, 1),
	}
	stream, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Another relay created it a moment ago: adopt it like any other.
		return EnsureStream(ctx, js, spec, log)
	}
	if err != nil {
		return cfg, fmt.Errorf("create stream %q with subjects %v: %w", spec.Name, cfg.Subjects, err)
	}
	log.Info().Str("stream", spec.Name).Strs("subjects", cfg.Subjects).Dur("duplicate_window", cfg.Duplicates).
		Msg("created stream")
	return stream.CachedInfo().Config, nil
}

func coveredBy(filters []string, pattern string) bool {
	for _, f := range filters {
		if Covers(f, pattern) {
			return true
		}
	}
	return false
}

func checkStreamName(name string) error {
	if name == "" || strings.ContainsAny(name, ".*> \t\r\n/\\") {
		return fmt.Errorf("stream name %q: must be non-empty without '.', '*', '>', '/', '\\' or whitespace", name)
	}
	return nil
}

// CheckSubject validates a literal subject such as the dead-letter subject.
func CheckSubject(s string) error {
	for _, tok := range strings.Split(s, ".") {
		if err := checkLiteralToken(tok); err != nil {
			return fmt.Errorf("subject %q: %w", s, err)
		}
	}
	return nil
}
