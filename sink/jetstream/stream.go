package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/sink"
)

// DefaultDuplicateWindow is the dedup window of a stream the relay creates
// when StreamSpec.DuplicateWindow is zero. Republished messages keep their
// Nats-Msg-Id: within the window JetStream drops the copies it has.
const DefaultDuplicateWindow = 2 * time.Minute

// StreamSpec describes the stream the relay publishes to.
type StreamSpec struct {
	// Name is required (the relay's default is contract.DefaultStream).
	Name string
	// Template is the subject template; the stream must cover its Filter.
	Template sink.Template
	// DeadLetterSubject must be covered by this stream or another one.
	DeadLetterSubject string
	// DuplicateWindow is the dedup window of a stream the relay creates
	// (DefaultDuplicateWindow when zero).
	DuplicateWindow time.Duration
	// StreamSettings are the replicas, storage and limits of a stream the
	// relay creates.
	StreamSettings
	// Atomic: the relay publishes atomic batches (Config.Atomic). A stream
	// it creates allows them; an existing one must.
	Atomic bool
}

// StreamSettings are the replicas, storage and limits of a stream the
// relay creates (the --stream-* flags); the zero value is one replica,
// file storage, no limits, discard new. An existing stream is adopted as
// it is: CheckStream warns about the settings it lacks.
type StreamSettings struct {
	Replicas int // 0 is 1
	Storage  natsjs.StorageType
	// MaxAge, MaxBytes and MaxMsgs limit the stream; zero is no limit.
	MaxAge   time.Duration
	MaxBytes int64
	MaxMsgs  int64
	// DiscardOld removes the oldest messages at the limits instead of
	// refusing new ones (consumers that fall behind lose events).
	DiscardOld bool
	// AllowBatched creates the stream with allow_batched (nats-server
	// 2.14+), so that a Publisher with FastIngestAuto publishes in
	// fast-ingest batches.
	AllowBatched bool
}

// ErrStreamConfig marks a stream that exists but cannot be used as it is.
// The relay never changes an operator's stream; the error says what to do.
var ErrStreamConfig = errors.New("stream configuration does not fit the relay")

// EnsureStream creates the stream when it is missing: file storage, its
// subjects the template's filter and the dead-letter subject. An existing
// stream is adopted as it is when it covers the template; it is never
// changed. It returns the stream's configuration.
func EnsureStream(ctx context.Context, js natsjs.JetStream, spec StreamSpec, log zerolog.Logger) (natsjs.StreamConfig, error) {
	if err := checkStreamName(spec.Name); err != nil {
		return natsjs.StreamConfig{}, err
	}
	stream, err := js.Stream(ctx, spec.Name)
	switch {
	case errors.Is(err, natsjs.ErrStreamNotFound):
		return createStream(ctx, js, spec, log)
	case err != nil:
		return natsjs.StreamConfig{}, fmt.Errorf("look up stream %q: %w", spec.Name, err)
	}
	cfg := stream.CachedInfo().Config
	for _, p := range CheckStream(ctx, js, cfg, spec) {
		if p.Fatal {
			return cfg, fmt.Errorf("%w: %s: %s", ErrStreamConfig, p.What, p.Fix)
		}
		log.Warn().Str("stream", spec.Name).Msg(p.What + ": " + p.Fix)
	}
	log.Info().Str("stream", spec.Name).Strs("subjects", cfg.Subjects).Dur("duplicate_window", cfg.Duplicates).
		Msg("using existing stream as it is")
	return cfg, nil
}

// StreamProblem is something wrong with an existing stream, with its fix.
// A Fatal one keeps the relay from using the stream.
type StreamProblem struct {
	// Kind is what is wrong: "subjects", "dead_letter_subject",
	// "retention", "mirror", "sealed", "no_ack" (fatal); "storage",
	// "discard", "per_subject", "settings" (warnings).
	Kind      string
	What, Fix string
	Fatal     bool
}

// CheckStream returns what is wrong with the existing stream whose
// configuration is cfg for spec: subjects that do not cover the template
// or the dead-letter subject, and what else keeps it from holding the
// relay's events as published (fatal: see adoptionProblems); memory
// storage, discarding old messages at its limits, and settings the
// stream lacks (warnings). It only reads.
func CheckStream(ctx context.Context, js natsjs.JetStream, cfg natsjs.StreamConfig, spec StreamSpec) []StreamProblem {
	// What the stream is (its retention, a mirror...) first: the first
	// fatal problem is the one EnsureStream reports.
	out := adoptionProblems(cfg, spec)
	if p, bad := atomicProblem(js.Conn(), cfg, spec); bad {
		out = append(out, p)
	}
	filter := spec.Template.Filter()
	if !coveredBy(cfg.Subjects, filter) {
		out = append(out, StreamProblem{Kind: "subjects", Fatal: true,
			What: fmt.Sprintf("stream %q has subjects %v, which do not cover %q rendered from the subject template %q", spec.Name, cfg.Subjects, filter, spec.Template),
			Fix:  fmt.Sprintf("add the subject to the stream (nats stream edit %s --subjects %s) or change the template", spec.Name, quoteArg(strings.Join(append(cfg.Subjects[:len(cfg.Subjects):len(cfg.Subjects)], filter), ",")))})
	}
	if !coveredBy(cfg.Subjects, spec.DeadLetterSubject) {
		other, err := js.StreamNameBySubject(ctx, spec.DeadLetterSubject)
		if err != nil || other == "" {
			out = append(out, StreamProblem{Kind: "dead_letter_subject", Fatal: true,
				What: fmt.Sprintf("no stream covers the dead-letter subject %q (stream %q has %v)", spec.DeadLetterSubject, spec.Name, cfg.Subjects),
				Fix:  fmt.Sprintf("add it to a stream (nats stream edit %s --subjects %s) or choose another dead-letter subject", spec.Name, quoteArg(strings.Join(append(cfg.Subjects[:len(cfg.Subjects):len(cfg.Subjects)], spec.DeadLetterSubject), ",")))})
		}
	}
	if cfg.Storage == natsjs.MemoryStorage {
		out = append(out, StreamProblem{Kind: "storage",
			What: fmt.Sprintf("stream %q uses memory storage: its events are lost when NATS restarts", spec.Name),
			Fix: fmt.Sprintf("storage cannot be changed in place: remove the stream (nats stream rm %s, after its consumers are done with it) and let `outbox-relay run` create it with file storage (--stream-storage file, the default), or create one yourself with --storage file and point --stream at it",
				spec.Name)})
	}
	if cfg.Discard == natsjs.DiscardOld && (cfg.MaxMsgs > 0 || cfg.MaxBytes > 0 || cfg.MaxAge > 0) {
		out = append(out, StreamProblem{Kind: "discard",
			What: fmt.Sprintf("stream %q discards old messages at its limits: consumers that fall behind lose events", spec.Name),
			Fix:  fmt.Sprintf("nats stream edit %s --discard new (the relay then waits at the limits instead)", spec.Name)})
	}
	return out
}

// quoteArg quotes a shell argument when it holds characters a shell would
// expand (the '*' and '>' of subject wildcards).
func quoteArg(s string) string {
	if strings.ContainsAny(s, "*> ") {
		return "'" + s + "'"
	}
	return s
}

func createStream(ctx context.Context, js natsjs.JetStream, spec StreamSpec, log zerolog.Logger) (natsjs.StreamConfig, error) {
	cfg := spec.Config()
	stream, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
		// Another relay created it a moment ago: adopt it like any other.
		return EnsureStream(ctx, js, spec, log)
	}
	if err != nil {
		return cfg, createError(ctx, js, spec, cfg, err)
	}
	created := stream.CachedInfo().Config
	if p, bad := atomicProblem(js.Conn(), created, spec); bad {
		return created, fmt.Errorf("%w: %s: %s", ErrStreamConfig, p.What, p.Fix)
	}
	log.Info().Str("stream", spec.Name).Strs("subjects", created.Subjects).Dur("duplicate_window", created.Duplicates).
		Int("replicas", created.Replicas).Str("storage", strings.ToLower(created.Storage.String())).Str("limits", Limits(created)).
		Msg("created stream")
	// Memory storage and discard old were asked for: the same warnings as
	// for a stream found with them.
	for _, p := range CheckStream(ctx, js, created, spec) {
		log.Warn().Str("stream", spec.Name).Msg(p.What + ": " + p.Fix)
	}
	return created, nil
}

// Config is the configuration of the stream the relay creates for spec:
// limits retention (the relay reads back what it published), its
// subjects the template's filter and the dead-letter subject, and spec's
// settings; discard new unless spec asks for old, so that a full stream
// refuses events, which the relay keeps until there is room, rather than
// dropping old ones consumers may not have read.
func (spec StreamSpec) Config() natsjs.StreamConfig {
	discard := natsjs.DiscardNew
	if spec.DiscardOld {
		discard = natsjs.DiscardOld
	}
	return natsjs.StreamConfig{
		Name:        spec.Name,
		Description: "Outbox events published by outbox-relay",
		Subjects:    []string{spec.Template.Filter(), spec.DeadLetterSubject},
		Storage:     spec.Storage,
		Retention:   natsjs.LimitsPolicy,
		Discard:     discard,
		Duplicates:  cmp.Or(spec.DuplicateWindow, DefaultDuplicateWindow),
		Replicas:    max(spec.Replicas, 1),
		MaxAge:      spec.MaxAge,
		MaxBytes:    cmp.Or(spec.MaxBytes, -1),
		MaxMsgs:     cmp.Or(spec.MaxMsgs, -1),

		AllowAtomicPublish: spec.Atomic,
		AllowBatchPublish:  spec.AllowBatched,
	}
}

func coveredBy(filters []string, pattern string) bool {
	for _, f := range filters {
		if sink.Covers(f, pattern) {
			return true
		}
	}
	return false
}

// checkStreamName refuses a name JetStream refuses: a configuration
// error (ErrStreamConfig), not an outage to wait out.
func checkStreamName(name string) error {
	if name == "" || strings.ContainsAny(name, ".*> \t\r\n/\\") {
		return fmt.Errorf("%w: stream name %q: must be non-empty without '.', '*', '>', '/', '\\' or whitespace: change --stream (OUTBOX_STREAM)", ErrStreamConfig, name)
	}
	return nil
}
