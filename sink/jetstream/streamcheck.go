package jetstream

import (
	"fmt"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// adoptionProblems are what else keeps an existing stream from keeping
// the relay's promise, beyond its subjects and storage (CheckStream):
//
//   - work-queue or interest retention, a mirror, a sealed stream, a
//     stream that does not acknowledge: fatal. The relay reads back what
//     it published to resume without duplicates and confirms WAL only on
//     a PubAck; consumed messages that vanish are published again, a
//     stream without PubAcks never lets the slot move.
//   - a per-subject limit: a warning, like discard old: events are
//     removed at once, by subject, also the ones the relay still reads
//     back after a restart.
//   - settings (the --stream-* flags) the stream does not have: a
//     warning, since the relay adopts a stream as it is.
func adoptionProblems(cfg natsjs.StreamConfig, spec StreamSpec) []StreamProblem {
	var out []StreamProblem
	name := spec.Name
	if p, bad := retentionProblem(cfg, name); bad {
		out = append(out, p)
	}
	if cfg.Mirror != nil {
		out = append(out, StreamProblem{Kind: "mirror", Fatal: true,
			What: fmt.Sprintf("stream %q is a mirror of %q: it takes no messages but the ones it copies", name, cfg.Mirror.Name),
			Fix:  fmt.Sprintf("point --stream at a stream the relay may publish to (the mirror's origin %s, if it covers the subjects), or at a new name the relay creates", cfg.Mirror.Name)})
	}
	if cfg.Sealed {
		out = append(out, StreamProblem{Kind: "sealed", Fatal: true,
			What: fmt.Sprintf("stream %q is sealed: it takes no more messages", name),
			Fix:  "a sealed stream cannot be unsealed: point --stream at another stream, or at a new name the relay creates"})
	}
	if cfg.NoAck {
		out = append(out, StreamProblem{Kind: "no_ack", Fatal: true,
			What: fmt.Sprintf("stream %q is set to no-ack: it sends no PubAck, and the relay confirms WAL to Postgres only on a PubAck", name),
			Fix:  fmt.Sprintf("nats stream edit %s --no-ack=false", name)})
	}
	if cfg.MaxMsgsPerSubject > 0 {
		out = append(out, StreamProblem{Kind: "per_subject",
			What: fmt.Sprintf("stream %q keeps at most %d messages per subject: older events of a subject are removed at once, before consumers may have read them, and events the relay reads back after a restart may be gone and are then published again", name, cfg.MaxMsgsPerSubject),
			Fix:  fmt.Sprintf("nats stream edit %s --max-msgs-per-subject -1 (limit the stream by age or size instead)", name)})
	}
	if p, differ := settingsProblem(cfg, spec); differ {
		out = append(out, p)
	}
	return out
}

// retentionProblem: the relay needs limits retention. Under work-queue
// or interest retention consumed messages are deleted, and the relay,
// which reads the stream back to learn what it holds, publishes them
// again.
func retentionProblem(cfg natsjs.StreamConfig, name string) (StreamProblem, bool) {
	var kind string
	switch cfg.Retention {
	case natsjs.WorkQueuePolicy:
		kind = "work-queue"
	case natsjs.InterestPolicy:
		kind = "interest"
	default:
		return StreamProblem{}, false
	}
	return StreamProblem{Kind: "retention", Fatal: true,
		What: fmt.Sprintf("stream %q has %s retention: it deletes messages once consumed, and the relay, which reads back what the stream holds to resume and repair without duplicates, would publish them again", name, kind),
		Fix: fmt.Sprintf("retention cannot be changed in place: give the relay a stream with --retention limits (a new name it creates, or nats stream add with --retention limits) and, for %s consumers, source it into a %s stream: nats stream add WORK --source %s --retention %s",
			kind, kind, name, map[string]string{"work-queue": "work", "interest": "interest"}[kind])}, true
}

// settingsProblem names the --stream-* settings the existing stream does
// not have: they apply only to a stream the relay creates.
func settingsProblem(cfg natsjs.StreamConfig, spec StreamSpec) (StreamProblem, bool) {
	var asked, has, edit []string
	differ := func(flag, want, got, natsFlag string) {
		asked = append(asked, flag+" "+want)
		has = append(has, got)
		if natsFlag != "" {
			edit = append(edit, natsFlag+" "+want)
		}
	}
	if spec.Replicas > 1 && cfg.Replicas != spec.Replicas {
		differ("--stream-replicas", fmt.Sprint(spec.Replicas), fmt.Sprintf("%d replicas", cfg.Replicas), "--replicas")
	}
	if spec.MaxAge > 0 && cfg.MaxAge != spec.MaxAge {
		differ("--stream-max-age", spec.MaxAge.String(), "max age "+limitText(int64(cfg.MaxAge), func(v int64) string { return time.Duration(v).String() }), "--max-age")
	}
	if spec.MaxBytes > 0 && cfg.MaxBytes != spec.MaxBytes {
		differ("--stream-max-bytes", fmt.Sprint(spec.MaxBytes), "max bytes "+limitText(cfg.MaxBytes, func(v int64) string { return fmt.Sprint(v) }), "--max-bytes")
	}
	if spec.MaxMsgs > 0 && cfg.MaxMsgs != spec.MaxMsgs {
		differ("--stream-max-msgs", fmt.Sprint(spec.MaxMsgs), "max messages "+limitText(cfg.MaxMsgs, func(v int64) string { return fmt.Sprint(v) }), "--max-msgs")
	}
	if spec.Storage == natsjs.MemoryStorage && cfg.Storage != spec.Storage {
		differ("--stream-storage", strings.ToLower(spec.Storage.String()), strings.ToLower(cfg.Storage.String())+" storage", "")
	}
	if spec.DiscardOld && cfg.Discard != natsjs.DiscardOld {
		differ("--stream-discard", "old", "discard new", "--discard")
	}
	if len(asked) == 0 {
		return StreamProblem{}, false
	}
	fix := "the relay adopts an existing stream as it is"
	if len(edit) > 0 {
		fix = fmt.Sprintf("nats stream edit %s %s, if the stream should have them (%s)", spec.Name, strings.Join(edit, " "), fix)
	}
	if spec.Storage == natsjs.MemoryStorage && cfg.Storage != spec.Storage {
		fix += "; storage cannot be changed in place"
	}
	return StreamProblem{Kind: "settings",
		What: fmt.Sprintf("stream %q exists with %s: %s apply only to a stream the relay creates", spec.Name, strings.Join(has, ", "), strings.Join(asked, ", ")),
		Fix:  fix}, true
}

func limitText(v int64, format func(int64) string) string {
	if v <= 0 {
		return "unlimited"
	}
	return format(v)
}

// RemovesByLimits reports whether the stream removes messages by its own
// limits: its max age, or its size and count limits with discard old.
// (With discard new a full stream refuses new messages instead.)
func RemovesByLimits(cfg natsjs.StreamConfig) bool {
	return cfg.MaxAge > 0 || (cfg.Discard == natsjs.DiscardOld && (cfg.MaxBytes > 0 || cfg.MaxMsgs > 0))
}

// Limits describes a stream's limits for people: "max age 24h0m0s, max
// bytes 1073741824 (discard new)", or "none".
func Limits(cfg natsjs.StreamConfig) string {
	var ls []string
	if cfg.MaxAge > 0 {
		ls = append(ls, "max age "+cfg.MaxAge.String())
	}
	if cfg.MaxBytes > 0 {
		ls = append(ls, fmt.Sprintf("max bytes %d", cfg.MaxBytes))
	}
	if cfg.MaxMsgs > 0 {
		ls = append(ls, fmt.Sprintf("max messages %d", cfg.MaxMsgs))
	}
	if cfg.MaxMsgsPerSubject > 0 {
		ls = append(ls, fmt.Sprintf("max messages per subject %d", cfg.MaxMsgsPerSubject))
	}
	if len(ls) == 0 {
		return "none"
	}
	discard := "new"
	if cfg.Discard == natsjs.DiscardOld {
		discard = "old"
	}
	return strings.Join(ls, ", ") + " (discard " + discard + ")"
}
