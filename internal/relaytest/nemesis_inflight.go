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
	// outages is how many times the running relays logged that JetStream
	// accepts events again during the step: their publishes failed and
	// were reconciled with the stream (NATS faults).
	outages int
}

// inFlightPatience is how long the nemesis waits for the load alone to
// put publishes in flight before it writes a backlog, as the fault suite
// does (InFlight).
const inFlightPatience = 5 * time.Second

// awaitInFlight waits until the running relays report publishes in flight
// (outbox_relay_publish_in_flight above 0), so that the fault meets a busy
// pipeline and not an idle one, and returns what it saw.
func (n *Nemesis) awaitInFlight() faultHit {
	n.t.Helper()
	st := n.step
	hit := faultHit{step: st.N, fault: st.Fault, lag: -1}
	start := time.Now()
	deadline := start.Add(inFlightPatience)
	for {
		if c := n.inFlight(); c > 0 {
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

// inFlight sums the running relays' publishes in flight.
func (n *Nemesis) inFlight() int {
	total := 0
	for _, r := range n.relays {
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

// outagesLogged counts the running relays' log lines saying that JetStream
// accepts events again (after a publish failure).
func (n *Nemesis) outagesLogged() int {
	total := 0
	for _, r := range n.all {
		total += r.r.CountLog(LogOutageOver)
	}
	return total
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
	busy, backlogs, natsFaults, reconciled := 0, 0, 0, 0
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
	}
	slices.Sort(counts)
	slices.Sort(lags)
	return fmt.Sprintf("%d of %d faults struck with publishes in flight at the last scrape before them (in flight: min %d, median %d, max %d; "+
		"scrape to fault: median %s, max %s); %d needed a backlog; after %d of %d NATS faults the relay reconciled failed publishes with the stream",
		busy, len(hits), counts[0], counts[len(counts)/2], counts[len(counts)-1],
		time.Duration(lags[len(lags)/2])*time.Microsecond, maxLag.Round(time.Microsecond), backlogs, reconciled, natsFaults)
}
