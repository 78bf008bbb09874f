package relaytest

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// faultHit is what a fault met: the publishes the relays had in flight at
// the last scrape before it, how long before the fault that scrape was,
// and whether a backlog had to be written to get them.
type faultHit struct {
	step     int
	fault    Fault
	inFlight int
	at       time.Time     // of the scrape
	lag      time.Duration // from the scrape to the fault; -1 until it fires
	waited   time.Duration // from the start of the wait to the scrape
	backlog  bool
	// What the relays logged during the step (from the fault to the
	// recovery): JetStream accepting events again after publishes failed
	// (outages), events found in the stream whose PubAck was lost and so
	// not republished (lostAcks), a new session skipping the events the
	// stream held beyond the slot's position (skips). They say the fault
	// met publishes that mattered.
	outages, lostAcks, skips int
}

// logMarks are the relay log lines a step counts (faultHit).
type logMarks struct{ outages, lostAcks, skips int }

// marks counts the lines of logMarks in every relay's log so far.
func (n *Nemesis) marks() logMarks {
	var m logMarks
	for _, r := range n.all {
		logs := r.r.Logs()
		m.outages += strings.Count(logs, LogOutageOver)
		m.lostAcks += strings.Count(logs, LogLostAcks)
		m.skips += strings.Count(logs, LogSkipStored)
	}
	return m
}

// inFlightPatience is how long the nemesis waits for the load alone to
// put publishes in flight before it writes a backlog, as the fault suite
// does (InFlight).
const inFlightPatience = 5 * time.Second

// awaitInFlight waits until relays rs report publishes in flight
// (outbox_relay_publish_in_flight above 0), so that the fault meets a busy
// pipeline and not an idle one, and returns what it saw.
func (n *Nemesis) awaitInFlight(rs []*nemesisRelay) faultHit {
	n.t.Helper()
	st := n.step
	hit := faultHit{step: st.N, fault: st.Fault, lag: -1}
	start := time.Now()
	deadline := start.Add(inFlightPatience)
	for {
		if c := inFlight(rs); c > 0 {
			hit.inFlight, hit.at, hit.waited = c, time.Now(), time.Since(start)
			return hit
		}
		if time.Now().After(deadline) {
			if hit.backlog {
				n.fatalf("no publish in flight within %s of a backlog of 2000 events", FaultWait)
			}
			n.logf("no publish in flight within %s under the load: writing a backlog of 2000 events", inFlightPatience)
			n.env.Backlog(2000)
			hit.backlog, deadline = true, time.Now().Add(FaultWait)
		}
		n.checkAlive()
		time.Sleep(2 * time.Millisecond)
	}
}

// inFlight sums the publishes in flight of relays rs.
func inFlight(rs []*nemesisRelay) int {
	total := 0
	for _, r := range rs {
		if v, err := r.r.Metric(InFlightMetric); err == nil {
			total += int(v)
		}
	}
	return total
}

// fire marks the moment the current step's fault strikes (the first call
// of the step counts).
func (n *Nemesis) fire() {
	if n.hit != nil && n.hit.lag < 0 {
		n.hit.lag = time.Since(n.hit.at)
	}
}

// checkDupAcks reads the running relays' duplicate acks; any new one is a
// finding of the current step.
func (n *Nemesis) checkDupAcks() {
	n.t.Helper()
	for _, r := range n.relays {
		if err := n.readDupAcks(r); err != nil {
			n.logf("relay %d: cannot read %s: %v", r.n, DuplicateAcksMetric, err)
		}
	}
}

// readDupAcks reads r's duplicate acks and makes a finding of any that are
// new since the last read: JetStream dropped a publish of an event it
// held, within its 1 s window; past it, the event would be stored twice.
// The relay promises neither (docs/guarantees.md).
func (n *Nemesis) readDupAcks(r *nemesisRelay) error {
	n.t.Helper()
	v, err := r.r.Metric(DuplicateAcksMetric)
	if err != nil {
		return err
	}
	d := v - r.dupSeen
	r.dupSeen = v
	n.dupAcks += d
	if d > 0 {
		n.finding("relay %d: %s rose by %v: it published again events the stream held (the duplicate window absorbed them)",
			r.n, DuplicateAcksMetric, d)
	}
	return nil
}

// hitSummary says how the faults met the pipeline.
func hitSummary(hits []faultHit) string {
	if len(hits) == 0 {
		return "no faults"
	}
	var counts, lags []int
	busy, backlogs, natsFaults, reconciled, lostAcks, restarts, skipped := 0, 0, 0, 0, 0, 0, 0
	var maxLag time.Duration
	for _, h := range hits {
		if h.inFlight > 0 {
			busy++
		}
		if h.backlog {
			backlogs++
		}
		counts = append(counts, h.inFlight)
		lags = append(lags, int(h.lag/time.Microsecond))
		maxLag = max(maxLag, h.lag)
		if strings.HasPrefix(string(h.fault), "nats-") {
			natsFaults++
			if h.outages > 0 {
				reconciled++
			}
		}
		if h.lostAcks > 0 {
			lostAcks++
		}
		if h.fault == FaultRelayKill || h.fault == FaultRelayTerm || h.fault == FaultSecondInstance {
			restarts++
			if h.skips > 0 {
				skipped++
			}
		}
	}
	slices.Sort(counts)
	slices.Sort(lags)
	return fmt.Sprintf("%d of %d faults struck with publishes in flight at the last scrape before them (in flight: min %d, median %d, max %d; "+
		"scrape to fault: median %s, max %s); %d needed a backlog; after %d of %d NATS faults the relay reconciled failed publishes with the stream; "+
		"after %d faults it found events stored whose PubAck was lost; after %d of %d relay restarts and second instances the new session skipped events the stream held",
		busy, len(hits), counts[0], counts[len(counts)/2], counts[len(counts)-1],
		time.Duration(lags[len(lags)/2])*time.Microsecond, maxLag.Round(time.Microsecond), backlogs, reconciled, natsFaults,
		lostAcks, skipped, restarts)
}
