package relaytest

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScheduleReplays: a seed gives the same schedule every time, and a
// longer duration extends it without changing its start.
func TestScheduleReplays(t *testing.T) {
	a := NewSchedule(42, time.Minute, AllFaults)
	b := NewSchedule(42, time.Minute, AllFaults)
	if a.String() != b.String() {
		t.Fatalf("seed 42 gave two schedules:\n%s\n%s", a, b)
	}
	if a.Planned < time.Minute || len(a.Steps) < 5 {
		t.Errorf("a minute's schedule plans %s in %d steps", a.Planned, len(a.Steps))
	}
	if !slices.ContainsFunc(a.Steps, func(st Step) bool {
		return (st.Fault == FaultRelayKill || st.Fault == FaultRelayTerm) && st.Hold >= DuplicateWindow+500*time.Millisecond
	}) {
		t.Errorf("a minute's schedule restarts no relay past the duplicate window:\n%s", a)
	}
	long := NewSchedule(42, 10*time.Minute, AllFaults)
	if !slices.Equal(long.Steps[:len(a.Steps)], a.Steps) {
		t.Errorf("a longer schedule does not start with the shorter one")
	}
	if other := NewSchedule(43, time.Minute, AllFaults); other.String() == a.String() {
		t.Errorf("seeds 42 and 43 gave the same schedule")
	}
	kinds := map[Fault]int{}
	within, past := map[Fault]int{}, map[Fault]int{}
	for _, st := range long.Steps {
		kinds[st.Fault]++
		if !slices.ContainsFunc(holds[st.Fault], func(h span) bool { return st.Hold >= h.min && st.Hold <= h.max }) ||
			st.Gap < gaps.min || st.Gap > gaps.max {
			t.Errorf("step %s: gap or hold outside its range", st)
		}
		if st.Fault == FaultBigTx && (st.Rows < bigTxMinRows || st.Rows > bigTxMaxRows) {
			t.Errorf("step %s: size outside its range", st)
		}
		if st.Fault == FaultRelayKill || st.Fault == FaultRelayTerm {
			if st.Hold < DuplicateWindow {
				within[st.Fault]++
			} else if st.Hold >= DuplicateWindow+500*time.Millisecond {
				past[st.Fault]++
			}
		}
	}
	if len(kinds) != len(AllFaults) {
		t.Errorf("10 minutes of faults drew only %d of %d kinds", len(kinds), len(AllFaults))
	}
	for _, f := range []Fault{FaultRelayKill, FaultRelayTerm} {
		if w, p := within[f], past[f]; w == 0 || w-p > 1 || p-w > 1 {
			t.Errorf("10 minutes of faults: %s restarts the relay %d times within the duplicate window and %d times past it, want as many of each", f, w, p)
		}
	}
	// Dealt in rounds: each kind once in every len(AllFaults) steps.
	for r := 0; (r+1)*len(AllFaults) <= len(long.Steps); r++ {
		round := map[Fault]bool{}
		for _, st := range long.Steps[r*len(AllFaults) : (r+1)*len(AllFaults)] {
			round[st.Fault] = true
		}
		if len(round) != len(AllFaults) {
			t.Errorf("round %d of the schedule has %d of %d kinds", r+1, len(round), len(AllFaults))
		}
	}
}

func TestParseFaults(t *testing.T) {
	for _, in := range []string{"", "all"} {
		if fs, err := ParseFaults(in); err != nil || len(fs) != len(AllFaults) {
			t.Errorf("ParseFaults(%q) = %v, %v", in, fs, err)
		}
	}
	fs, err := ParseFaults("nats-kill, relay-kill,nats-kill")
	if err != nil || !slices.Equal(fs, []Fault{FaultNATSKill, FaultRelayKill}) {
		t.Errorf("ParseFaults = %v, %v", fs, err)
	}
	if _, err := ParseFaults("relay-kil"); err == nil || !strings.Contains(err.Error(), "relay-kill") {
		t.Errorf("a misspelt fault: %v", err)
	}
	s := NewSchedule(7, time.Minute, []Fault{FaultPGReset})
	for _, st := range s.Steps {
		if st.Fault != FaultPGReset {
			t.Fatalf("step %s outside the faults asked for", st)
		}
	}
}
