package relaytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// dumpOnFailure writes the schedule, every relay's log and the Postgres
// log to a directory that outlives the test, and prints the relays'
// warnings and errors, when the test failed.
func (n *Nemesis) dumpOnFailure() {
	if !n.t.Failed() {
		return
	}
	seed := n.cfg.Schedule.Seed
	n.t.Logf("nemesis FAILED with seed %d; replay: %s", seed, n.cfg.Replay)
	n.t.Logf("nemesis seed %d at the failure: %d of %d faults run (%s), %d relay processes, workload %d events committed, %d rolled back",
		seed, n.faultsRun(), len(n.cfg.Schedule.Steps), n.countsString(), len(n.all),
		len(n.cfg.Workload.Committed()), len(n.cfg.Workload.Aborted()))
	dir, err := os.MkdirTemp("", fmt.Sprintf("outbox-nemesis-%d-", seed))
	if err != nil {
		n.t.Logf("cannot keep the logs: %v", err)
		return
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			n.t.Logf("write %s: %v", name, err)
		}
	}
	write("schedule.txt", n.cfg.Schedule.String()+"\n")
	write("postgres.log", n.env.ClusterLog())
	if n.nats != nil {
		for i := 0; i < n.nats.Len(); i++ {
			write(fmt.Sprintf("nats-%s.log", n.nats.Name(i)), n.nats.Output(i))
		}
	}
	var notable []string
	for _, r := range n.all {
		logs := r.r.Logs()
		write(fmt.Sprintf("relay-%02d-step-%d.log", r.n, r.step), logs)
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) ||
				strings.Contains(line, "panic") || strings.Contains(line, "DATA RACE") {
				notable = append(notable, fmt.Sprintf("relay %d (step %d): %s", r.n, r.step, line))
			}
		}
	}
	n.t.Logf("nemesis seed %d: logs of %d relays, the schedule and the Postgres log kept in %s", seed, len(n.all), dir)
	n.t.Logf("relay warnings and errors (%d; last 60):\n%s", len(notable), tail(strings.Join(notable, "\n"), 60))
	for _, r := range n.relays {
		n.t.Logf("relay %d (running at the end) log tail:\n%s", r.n, tail(r.r.Logs(), 30))
	}
}

// Summary is the result in a few lines: seed, faults, events, rate, how
// the faults met the pipeline, the check.
func (r NemesisResult) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nemesis summary: seed %d, %d faults in %s (whole test %s), %d relay processes, NATS a %d-node cluster (stream R%d)\n",
		r.Seed, r.Steps, r.Faulting.Round(time.Second), r.Total.Round(time.Second), r.Relays, natsNodes, natsNodes)
	b.WriteString("  faults:")
	for _, f := range AllFaults {
		if c := r.Counts[f]; c > 0 {
			fmt.Fprintf(&b, " %s=%d (recovery ≤%s)", f, c, r.Recovery[f].Round(100*time.Millisecond))
		}
	}
	fmt.Fprintf(&b, "\n  relay restarts: %d, %d of them held past the %s duplicate window; stream leaders killed: %d; "+
		"stream leader elections in the nats-server logs: %d (the first, one per leader killed and per restart of the whole cluster: %d; "+
		"a cluster stopped node by node may elect more on the way down, each bounded as a leader change)",
		r.RelayRestarts, r.PastWindow, DuplicateWindow, r.Counts[FaultLeaderKill], r.LeaderElections,
		1+r.Counts[FaultLeaderKill]+r.Counts[FaultNATSKill]+r.Counts[FaultNATSStop])
	fmt.Fprintf(&b, "\n  in flight: %s", hitSummary(r.Hits))
	fmt.Fprintf(&b, "\n  load: %d events committed in %s, %.0f a second (target %.0f, fails under %.0f)",
		r.Check.Committed, r.LoadTime.Round(time.Second), r.Achieved, r.Rate, MinRateShare*r.Rate)
	fmt.Fprintf(&b, "\n  events: %d committed (%d transactions), %d rolled back, %d in commits that failed (the table decides); table %d rows, stream %d messages; %v duplicate PubAcks (checked after every step)",
		r.Check.Committed, r.Check.CommittedTx, r.Check.Aborted, r.Unknown, r.Check.Rows, r.Check.Messages, r.DuplicateAcks)
	fmt.Fprintf(&b, "\n  check: %s", r.Check)
	return b.String()
}

func (n *Nemesis) faultsRun() int {
	total := 0
	for _, c := range n.counts {
		total += c
	}
	return total
}

// countsString lists the faults injected so far per kind.
func (n *Nemesis) countsString() string {
	var parts []string
	for _, f := range AllFaults {
		if c := n.counts[f]; c > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", f, c))
		}
	}
	return strings.Join(parts, " ")
}
