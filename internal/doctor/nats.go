package doctor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultMaxOutage is the longest NATS outage the duplicate window is
// checked against unless told otherwise: the window the relay gives a
// stream it creates.
const DefaultMaxOutage = jssink.DefaultDuplicateWindow

// headerAllowance is room for the headers the relay adds to a payload
// (ids, types, times, LSN, source): they count against the message size.
const headerAllowance = 1024

// NATSOptions are what the NATS checks judge against.
type NATSOptions struct {
	Stream jssink.StreamSpec
	// MaxOutage is the longest time the relay may be unable to publish
	// (a NATS outage) without a resend being stored twice.
	MaxOutage time.Duration
	// Payload is what Postgres holds; zero rows when unknown.
	Payload PGSummary
	// Poll, when set, is the polling relay's timing (doctor --source
	// poll): the duplicate window is also checked against it.
	Poll *PollTiming
}

// PollTiming is the polling relay's timing the duplicate window must cover.
type PollTiming struct {
	// Interval is --poll-interval, AckTimeout --ack-timeout.
	Interval, AckTimeout time.Duration
}

type natsFacts struct {
	Server       string
	Cluster      string
	MaxPayload   int64
	JetStreamErr error
	StreamExists bool
	Stream       jetstream.StreamConfig
	Problems     []jssink.StreamProblem
	// SubjectOwner is another stream that already takes the template's
	// subjects, when the relay's stream does not exist.
	SubjectOwner string
	// Sync is the servers' fsync policy, nil when this user cannot see it.
	Sync *syncPolicy
}

type syncPolicy struct {
	Always   bool
	Interval time.Duration
}

// CheckNATS reads nc's server and the stream and judges them.
func CheckNATS(ctx context.Context, nc *nats.Conn, o NATSOptions) ([]Finding, error) {
	f, err := readNATS(ctx, nc, o)
	if err != nil {
		return nil, err
	}
	return natsFindings(f, o), nil
}

func readNATS(ctx context.Context, nc *nats.Conn, o NATSOptions) (natsFacts, error) {
	f := natsFacts{Server: nc.ConnectedServerName() + " " + nc.ConnectedServerVersion(), Cluster: nc.ConnectedClusterName(), MaxPayload: nc.MaxPayload()}
	js, err := jetstream.New(nc)
	if err != nil {
		return f, fmt.Errorf("open JetStream: %w", err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		f.JetStreamErr = err
		return f, nil
	}
	stream, err := js.Stream(ctx, o.Stream.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		owner, err := js.StreamNameBySubject(ctx, o.Stream.Template.Filter())
		if err == nil {
			f.SubjectOwner = owner
		}
		// The stream the relay would create: the warnings it would log.
		f.Problems = jssink.CheckStream(ctx, js, o.Stream.Config(), o.Stream)
	case err != nil:
		return f, fmt.Errorf("look up stream %q: %w", o.Stream.Name, err)
	default:
		f.StreamExists = true
		f.Stream = stream.CachedInfo().Config
		f.Problems = jssink.CheckStream(ctx, js, f.Stream, o.Stream)
	}
	f.Sync = readSync(ctx, nc)
	return f, nil
}

// readSync asks a server for its JetStream settings; only users of the
// system account get an answer.
func readSync(ctx context.Context, nc *nats.Conn) *syncPolicy {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, "$SYS.REQ.SERVER.PING.VARZ", nil)
	if err != nil {
		return nil
	}
	var v struct {
		Data struct {
			JetStream struct {
				Config *struct {
					SyncInterval time.Duration `json:"sync_interval"`
					SyncAlways   bool          `json:"sync_always"`
				} `json:"config"`
			} `json:"jetstream"`
		} `json:"data"`
	}
	if json.Unmarshal(msg.Data, &v) != nil || v.Data.JetStream.Config == nil {
		return nil
	}
	return &syncPolicy{Always: v.Data.JetStream.Config.SyncAlways, Interval: v.Data.JetStream.Config.SyncInterval}
}

// natsFindings judges what readNATS found.
func natsFindings(f natsFacts, o NATSOptions) []Finding {
	out := []Finding{ok("nats.server", "connected to %s%s", f.Server, clusterNote(f.Cluster))}
	if f.JetStreamErr != nil {
		return append(out, problem(Error, "nats.jetstream",
			"enable JetStream: start nats-server with -js (or a jetstream {} block in its config) and, with accounts, jetstream: enabled for this user's account",
			"JetStream is not available to this user: %v", f.JetStreamErr))
	}
	out = append(out, ok("nats.jetstream", "JetStream is enabled"))
	out = append(out, streamFindings(f, o)...)
	out = append(out, duplicateWindowFinding(f, o), replicasFinding(f, o), messageSizeFinding(f, o), syncFinding(f))
	if o.Poll != nil {
		out = append(out, pollDuplicateWindowFinding(f, o))
	}
	return out
}

func clusterNote(cluster string) string {
	if cluster == "" {
		return ""
	}
	return ", cluster " + cluster
}

func streamFindings(f natsFacts, o NATSOptions) []Finding {
	name := o.Stream.Name
	if !f.StreamExists {
		if f.SubjectOwner != "" {
			return []Finding{problem(Error, "nats.stream",
				fmt.Sprintf("use --stream %s (nats stream info %s), or remove the subjects from it: nats stream edit %s --subjects ...", f.SubjectOwner, f.SubjectOwner, f.SubjectOwner),
				"stream %q does not exist and stream %q already takes the subjects %q: creating it would fail (overlapping subjects)", name, f.SubjectOwner, o.Stream.Template.Filter())}
		}
		cfg := o.Stream.Config()
		out := []Finding{info("nats.stream", "stream %q does not exist yet: `outbox-relay run` creates it (%s storage, replicas %d, limits: %s, subjects %q and %q, duplicate window %s)",
			name, strings.ToLower(cfg.Storage.String()), cfg.Replicas, jssink.Limits(cfg), o.Stream.Template.Filter(), o.Stream.DeadLetterSubject, createdWindow(o))}
		for _, p := range f.Problems {
			out = append(out, problem(Warn, "nats.stream_"+p.Kind, p.Fix, "%s", p.What))
		}
		return out
	}
	var out []Finding
	bad := map[string]bool{}
	for _, p := range f.Problems {
		bad[p.Kind] = true
		sev := Warn
		if p.Fatal || p.Kind == "storage" {
			// Memory storage works, but loses the events at a restart of
			// NATS after the relay confirmed them to Postgres: no way back.
			sev = Error
		}
		out = append(out, problem(sev, "nats.stream_"+p.Kind, p.Fix, "%s", p.What))
	}
	if !bad["subjects"] && !bad["dead_letter_subject"] {
		out = append(out, ok("nats.stream_subjects", "stream %q subjects %v cover %q and the dead-letter subject %q", name, f.Stream.Subjects, o.Stream.Template.Filter(), o.Stream.DeadLetterSubject))
	}
	if !bad["storage"] {
		out = append(out, ok("nats.stream_storage", "stream %q uses %s storage", name, strings.ToLower(f.Stream.Storage.String())))
	}
	return out
}

func createdWindow(o NATSOptions) time.Duration {
	return cmp.Or(o.Stream.DuplicateWindow, jssink.DefaultDuplicateWindow)
}

// duplicateWindowFinding: a publish resent after an outage carries the same
// Nats-Msg-Id; JetStream drops it only within the duplicate window. The
// relay reads the stream before it resends, so the window is the second
// line of defence; it must still span the outages one plans for.
func duplicateWindowFinding(f natsFacts, o NATSOptions) Finding {
	const check = "nats.duplicate_window"
	outage := cmp.Or(o.MaxOutage, DefaultMaxOutage)
	window, fix := createdWindow(o), fmt.Sprintf("run the relay with --duplicate-window %s (it creates the stream with it)", shortDuration(outage))
	if f.StreamExists {
		window, fix = f.Stream.Duplicates, fmt.Sprintf("nats stream edit %s --dupe-window %s", o.Stream.Name, shortDuration(outage))
	}
	if window < outage {
		return problem(Error, check, fix,
			"duplicate window %s is shorter than the longest outage to tolerate (--max-outage %s): JetStream drops a repeated Nats-Msg-Id only within the window, so a copy sent later than that after the original (a resend the relay's reconciliation after an outage cannot rule out, a standby taking over, verify --republish) is stored twice",
			window, outage)
	}
	return ok(check, "duplicate window %s covers an outage of %s (--max-outage)", window, outage)
}

func replicasFinding(f natsFacts, o NATSOptions) Finding {
	const check = "nats.replicas"
	replicas := max(o.Stream.Replicas, 1)
	if f.StreamExists {
		replicas = f.Stream.Replicas
	}
	switch {
	case !f.StreamExists && replicas > 1 && f.Cluster == "":
		return problem(Error, check, "use --stream-replicas 1 with a single server, or a JetStream cluster",
			"--stream-replicas %d: a single server (no cluster) keeps one copy; creating stream %q would fail", replicas, o.Stream.Name)
	case replicas == 1 && f.Cluster != "" && !f.StreamExists:
		return problem(Warn, check, "run the relay with --stream-replicas 3",
			"stream %q would be created with one replica in cluster %s: the loss of that server's disk loses its events", o.Stream.Name, f.Cluster)
	case replicas == 1 && f.Cluster != "":
		return problem(Warn, check, fmt.Sprintf("nats stream edit %s --replicas 3", o.Stream.Name),
			"stream %q has one replica in cluster %s: the loss of that server's disk loses its events", o.Stream.Name, f.Cluster)
	case replicas == 1:
		return info(check, "stream %q has one replica (single server): its disk holds the only copy", o.Stream.Name)
	}
	return ok(check, "stream %q has %d replicas", o.Stream.Name, replicas)
}

func messageSizeFinding(f natsFacts, o NATSOptions) Finding {
	const check = "nats.max_message_size"
	limit, what := f.MaxPayload, "the server's max_payload"
	if f.StreamExists && f.Stream.MaxMsgSize > 0 && int64(f.Stream.MaxMsgSize) < limit {
		limit, what = int64(f.Stream.MaxMsgSize), "the stream's max message size"
	}
	if o.Payload.PayloadRows == 0 {
		return info(check, "no rows in the table to compare with %s (%s)", what, HumanBytes(limit))
	}
	need := o.Payload.LargestPayload + headerAllowance
	if need > limit {
		return problem(Error, check,
			fmt.Sprintf("raise max_payload in the nats-server config (max_payload: %d, at most 64MB) or, for the stream, nats stream edit %s --max-msg-size %d; or keep payloads smaller", roundUpMiB(need), o.Stream.Name, roundUpMiB(need)),
			"the largest payload among %d rows is %s; with the headers it exceeds %s (%s): such events go to the dead-letter subject",
			o.Payload.PayloadRows, HumanBytes(o.Payload.LargestPayload), what, HumanBytes(limit))
	}
	return ok(check, "largest payload among %d rows is %s, within %s (%s)", o.Payload.PayloadRows, HumanBytes(o.Payload.LargestPayload), what, HumanBytes(limit))
}

func roundUpMiB(n int64) int64 { return (n + 1<<20 - 1) &^ (1<<20 - 1) }

func syncFinding(f natsFacts) Finding {
	const check = "nats.sync"
	switch {
	case f.Sync == nil:
		return info(check, "the servers' fsync policy is not visible to this user (system account only): check jetstream { sync_interval } in the server config; by default JetStream fsyncs every 2 minutes, so a power loss of every replica at once can lose acknowledged events")
	case f.Sync.Always:
		return ok(check, "sync_interval: always (every write is fsynced before its PubAck)")
	}
	interval := cmp.Or(f.Sync.Interval, 2*time.Minute)
	return info(check, "JetStream fsyncs every %s: acknowledged events can be lost if every replica loses power at once; for single-server setups consider jetstream { sync_interval: always } (slower)", interval)
}

// shortDuration writes 2m rather than 2m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
