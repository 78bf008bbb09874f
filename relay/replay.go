package relay

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/progress"
	"github.com/outbox-relay/outbox-relay/sink"
)

// ReplayOptions say what `replay` republishes and where: the committed
// rows created in [Since, Until), of the aggregates named (all when none),
// as copies (contract.ReplayCopy) for consumers that rebuild a projection.
type ReplayOptions struct {
	Since, Until   time.Time
	AggregateTypes []string
	AggregateIDs   []string
	// ToStream, SubjectPrefix and IntoRelayStream choose where the copies
	// go (see replayTarget): another stream, subjects under a prefix, or,
	// only when asked for, the relay's own stream and subjects.
	ToStream        string
	SubjectPrefix   string
	IntoRelayStream bool
	// RunID names the run in every copy's Nats-Msg-Id; a rerun with the
	// same id resumes where the run stopped (see Replay).
	RunID string
	// Progress is how often a run logs how far it got (10s when zero).
	Progress time.Duration
	// Show shows the progress: log lines when nil.
	Show progress.Reporter
}

// Check says what is wrong with the options, and what to do about it;
// relayStream is the relay's stream.
func (o ReplayOptions) Check(relayStream string) error {
	switch {
	case o.Since.IsZero():
		return errors.New("--since is required: the time (RFC 3339) of the oldest rows to replay")
	case !o.Until.IsZero() && !o.Until.After(o.Since):
		return fmt.Errorf("--until %s is not after --since %s: nothing to replay", o.Until.Format(time.RFC3339), o.Since.Format(time.RFC3339))
	case o.IntoRelayStream && (o.ToStream != "" || o.SubjectPrefix != ""):
		return errors.New("--into-relay-stream publishes on the relay's own subjects: drop --to-stream and --subject-prefix, or drop it")
	case !o.IntoRelayStream && o.ToStream == "" && o.SubjectPrefix == "":
		return fmt.Errorf("say where the copies go: --to-stream S or --subject-prefix P; to publish them into the relay's own stream %q, which its consumers read, pass --into-relay-stream", relayStream)
	case o.ToStream == relayStream:
		return fmt.Errorf("--to-stream %q is the relay's own stream: pass --into-relay-stream instead to publish the copies there on purpose", o.ToStream)
	case o.RunID != "":
		if err := contract.CheckRunID(o.RunID); err != nil {
			return fmt.Errorf("--run-id: %w", err)
		}
	}
	if o.SubjectPrefix != "" {
		return checkPrefix(o.SubjectPrefix)
	}
	return nil
}

// checkPrefix refuses a subject prefix with wildcards, empty tokens or
// characters a subject cannot hold.
func checkPrefix(p string) error {
	if strings.ContainsAny(p, "*>") {
		return fmt.Errorf("--subject-prefix %q: no wildcards; the copies' subjects are the prefix, a dot, and the event's subject", p)
	}
	if err := sink.CheckSubject(p); err != nil {
		return fmt.Errorf("--subject-prefix: %w", err)
	}
	return nil
}

// prefixOf returns the prefix P of a stream whose only subject is P.>:
// what --to-stream alone publishes under.
func prefixOf(stream string, subjects []string) (string, error) {
	if len(subjects) == 1 {
		if p, ok := strings.CutSuffix(subjects[0], ".>"); ok && !strings.ContainsAny(p, "*>") {
			return p, nil
		}
	}
	return "", fmt.Errorf("stream %q stores %s, not one P.> of which the copies' subjects could be P.<subject>: give --subject-prefix P, with P.> among its subjects",
		stream, strings.Join(subjects, ", "))
}

// NewRunID returns a run id for a new replay: the time it starts (UTC),
// then 8 random hex digits, so that two runs started together differ.
func NewRunID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// where returns the condition on the rows to replay, and its arguments
// (the same for every table: see RowSource.Each).
func (o ReplayOptions) where() (string, []any) {
	var until *time.Time
	if !o.Until.IsZero() {
		until = &o.Until
	}
	types, ids := o.AggregateTypes, o.AggregateIDs
	if types == nil {
		types = []string{}
	}
	if ids == nil {
		ids = []string{}
	}
	return `created_at >= $1 AND ($2::timestamptz IS NULL OR created_at < $2)` +
			` AND (cardinality($3::text[]) = 0 OR aggregate_type::text = ANY($3::text[]))` +
			` AND (cardinality($4::text[]) = 0 OR aggregate_id::text = ANY($4::text[]))`,
		[]any{o.Since, until, types, ids}
}
