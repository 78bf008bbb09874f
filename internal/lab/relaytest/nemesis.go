package relaytest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The nemesis: a seeded random schedule of the faults the suite knows,
// run one after the other under load (see Nemesis in nemesis_run.go). The
// schedule is a pure function of the seed, the planned duration and the
// fault kinds allowed: the same seed replays the same faults, in the same
// order, with the same gaps and hold times. Only the timing of the system
// under test varies from one run to the next.

// Fault is a kind of fault the nemesis injects.
type Fault string

// The fault kinds. Each one is healed before the next one starts. NATS is
// a cluster of three nats-server processes holding the stream with three
// replicas (see NewNemesis).
const (
	FaultRelayKill      Fault = "relay-kill"       // SIGKILL the relay, restart it after Hold
	FaultRelayTerm      Fault = "relay-term"       // SIGTERM the relay (it must exit 0), restart it after Hold
	FaultNATSKill       Fault = "nats-kill"        // SIGKILL every nats-server, restart them on their stores after Hold
	FaultNATSStop       Fault = "nats-stop"        // stop every nats-server gracefully (SIGTERM), restart them after Hold
	FaultLeaderKill     Fault = "nats-leader-kill" // SIGKILL the nats-server leading the stream, restart it on its store after Hold
	FaultPGFast         Fault = "pg-fast"          // pg_ctl stop -m fast, start after Hold
	FaultPGImmediate    Fault = "pg-immediate"     // pg_ctl stop -m immediate (a crash), start after Hold
	FaultPGReset        Fault = "pg-reset"         // reset the relay's Postgres connections, refuse new ones for Hold
	FaultPGBlackhole    Fault = "pg-blackhole"     // nothing passes between relay and Postgres for Hold
	FaultNATSReset      Fault = "nats-reset"       // reset the relay's NATS connections (to every node), refuse new ones for Hold
	FaultNATSBlackhole  Fault = "nats-blackhole"   // nothing passes between relay and any NATS node for Hold
	FaultSecondInstance Fault = "second-instance"  // a second relay on the slot for Hold, then one of the two ends
	FaultBigTx          Fault = "big-tx"           // one large transaction on a table outside the publication
)

// AllFaults lists every fault kind, in the order summaries print them.
var AllFaults = []Fault{
	FaultRelayKill, FaultRelayTerm, FaultNATSKill, FaultNATSStop, FaultLeaderKill, FaultPGFast, FaultPGImmediate,
	FaultPGReset, FaultPGBlackhole, FaultNATSReset, FaultNATSBlackhole, FaultSecondInstance, FaultBigTx,
}

// ParseFaults reads a comma-separated list of fault kinds; "" and "all"
// mean every kind.
func ParseFaults(list string) ([]Fault, error) {
	list = strings.TrimSpace(list)
	if list == "" || list == "all" {
		return slices.Clone(AllFaults), nil
	}
	var out []Fault
	for _, name := range strings.Split(list, ",") {
		f := Fault(strings.TrimSpace(name))
		if !slices.Contains(AllFaults, f) {
			return nil, fmt.Errorf("unknown fault %q (known: %s)", name, joinFaults(AllFaults))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

func joinFaults(fs []Fault) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ",")
}

// span is a range of durations drawn uniformly.
type span struct{ min, max time.Duration }

// DuplicateWindow is the dedup window of the nemesis's stream: an event
// published again later than this after it was stored is stored twice.
const DuplicateWindow = time.Second

// holds are how long each kind of fault lasts, drawn from one of its spans
// (taken in turn). A relay is restarted within the duplicate window half
// the time (a resend would be dropped by JetStream, and counted in the
// relay's duplicate PubAcks, which must stay 0) and past it otherwise (a
// resend would be stored twice, and the check fails on it). Blackholes
// reach past the relay's silence limit (wal_sender_timeout + its margin,
// 7.5 s with the test clusters' 5 s) and its ack timeout, and also stay
// under them. A killed stream leader stays down past the election of the
// next one.
var holds = map[Fault][]span{
	FaultRelayKill:      {{0, DuplicateWindow}, {DuplicateWindow + 500*time.Millisecond, 5 * time.Second}},
	FaultRelayTerm:      {{0, DuplicateWindow}, {DuplicateWindow + 500*time.Millisecond, 5 * time.Second}},
	FaultNATSKill:       {{500 * time.Millisecond, 6 * time.Second}},
	FaultNATSStop:       {{500 * time.Millisecond, 6 * time.Second}},
	FaultLeaderKill:     {{time.Second, 10 * time.Second}},
	FaultPGFast:         {{500 * time.Millisecond, 5 * time.Second}},
	FaultPGImmediate:    {{500 * time.Millisecond, 5 * time.Second}},
	FaultPGReset:        {{200 * time.Millisecond, 4 * time.Second}},
	FaultPGBlackhole:    {{time.Second, 15 * time.Second}},
	FaultNATSReset:      {{200 * time.Millisecond, 4 * time.Second}},
	FaultNATSBlackhole:  {{time.Second, 15 * time.Second}},
	FaultSecondInstance: {{time.Second, 10 * time.Second}},
	FaultBigTx:          {{0, 0}},
}

// gaps are the healthy time under load between one fault's recovery and
// the next fault.
var gaps = span{200 * time.Millisecond, 3 * time.Second}

// Big transactions write this many rows (of ~200 bytes each).
const bigTxMinRows, bigTxMaxRows = 100_000, 300_000

// bigTxPlanned is what a big transaction counts for in the planned time.
const bigTxPlanned = 3 * time.Second

// Step is one fault of a schedule.
type Step struct {
	N     int           // 1-based position in the schedule
	Fault Fault         // what
	Gap   time.Duration // healthy time under load before it
	Hold  time.Duration // how long it lasts before it is healed
	// second-instance: which of the two relays ends after Hold, and how.
	EndOlder bool // the one that was streaming (the new one takes over); else the new standby
	EndKill  bool // SIGKILL; else SIGTERM
	// big-tx: its size and outcome.
	Rows  int
	Abort bool
}

func (s Step) String() string {
	b := fmt.Sprintf("#%d after %s: %s", s.N, s.Gap, s.Fault)
	switch s.Fault {
	case FaultBigTx:
		outcome := "commit"
		if s.Abort {
			outcome = "rollback"
		}
		return fmt.Sprintf("%s %d rows, %s", b, s.Rows, outcome)
	case FaultSecondInstance:
		which, how := "new standby", "SIGTERM"
		if s.EndOlder {
			which = "older (streaming) relay"
		}
		if s.EndKill {
			how = "SIGKILL"
		}
		return fmt.Sprintf("%s for %s, then %s of the %s", b, s.Hold, how, which)
	}
	return fmt.Sprintf("%s for %s", b, s.Hold)
}

// Schedule is the faults of one nemesis run.
type Schedule struct {
	Seed   uint64
	Faults []Fault // the kinds it drew from
	Steps  []Step
	// Planned is the sum of the gaps and hold times (a big transaction
	// counts for bigTxPlanned); the run takes longer by the recovery waits.
	Planned time.Duration
}

// NewSchedule draws steps from seed until their planned time reaches
// duration. The kinds are dealt in rounds, each a shuffle of all of them,
// so that a short run meets most kinds and a long one every kind about
// equally often. The steps depend only on the seed and the fault kinds: a
// longer duration extends the schedule of a shorter one.
func NewSchedule(seed uint64, duration time.Duration, faults []Fault) Schedule {
	s := Schedule{Seed: seed, Faults: slices.Clone(faults)}
	if len(faults) == 0 {
		return s
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x6e656d65736973)) // "nemesis"
	var deck []Fault
	drawn := map[Fault]int{}
	for s.Planned < duration {
		if len(deck) == 0 {
			for _, i := range rng.Perm(len(faults)) {
				deck = append(deck, faults[i])
			}
		}
		st := Step{N: len(s.Steps) + 1, Fault: deck[0], Gap: draw(rng, gaps)}
		deck = deck[1:]
		spans := holds[st.Fault]
		// Each kind starts at another span (relay-kill within the
		// duplicate window, relay-term past it), so that a short run
		// meets both.
		st.Hold = draw(rng, spans[(drawn[st.Fault]+slices.Index(faults, st.Fault))%len(spans)])
		drawn[st.Fault]++
		switch st.Fault {
		case FaultSecondInstance:
			st.EndOlder, st.EndKill = rng.IntN(2) == 0, rng.IntN(2) == 0
		case FaultBigTx:
			st.Rows = bigTxMinRows + rng.IntN(bigTxMaxRows-bigTxMinRows+1)
			st.Abort = rng.IntN(4) == 0
			st.Rows -= st.Rows % 1000
		}
		s.Steps = append(s.Steps, st)
		s.Planned += st.Gap + st.Hold
		if st.Fault == FaultBigTx {
			s.Planned += bigTxPlanned
		}
	}
	return s
}

// draw returns a duration in sp, rounded to 10 ms so that printed
// schedules read well.
func draw(rng *rand.Rand, sp span) time.Duration {
	d := sp.min
	if sp.max > sp.min {
		d += time.Duration(rng.Int64N(int64(sp.max - sp.min)))
	}
	return d.Round(10 * time.Millisecond)
}

// String prints the schedule, one step a line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nemesis schedule: seed %d, %d faults from {%s}, planned %s (gaps and holds, without recovery waits)",
		s.Seed, len(s.Steps), joinFaults(s.Faults), s.Planned.Round(time.Second))
	for _, st := range s.Steps {
		b.WriteString("\n  ")
		b.WriteString(st.String())
	}
	return b.String()
}
