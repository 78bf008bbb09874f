package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// TestReplayOptionsCheck: a replay needs --since, an --until after it, and
// somewhere to go; the relay's own stream only when asked for by
// --into-relay-stream, and then on the relay's subjects alone.
func TestReplayOptionsCheck(t *testing.T) {
	since := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		o    ReplayOptions
		want string // in the error; "" for none
	}{
		{"prefix", ReplayOptions{Since: since, SubjectPrefix: "replay"}, ""},
		{"stream", ReplayOptions{Since: since, ToStream: "REBUILD"}, ""},
		{"stream and prefix", ReplayOptions{Since: since, Until: since.Add(time.Hour), ToStream: "REBUILD", SubjectPrefix: "rebuild.v2", RunID: "r-1"}, ""},
		{"into the relay's stream", ReplayOptions{Since: since, IntoRelayStream: true}, ""},
		{"no since", ReplayOptions{SubjectPrefix: "replay"}, "--since is required"},
		{"until before since", ReplayOptions{Since: since, Until: since.Add(-time.Second), SubjectPrefix: "replay"}, "not after --since"},
		{"until at since", ReplayOptions{Since: since, Until: since, SubjectPrefix: "replay"}, "not after --since"},
		{"nowhere", ReplayOptions{Since: since}, "--into-relay-stream"},
		{"the relay's stream by name", ReplayOptions{Since: since, ToStream: "OUTBOX"}, "pass --into-relay-stream"},
		{"into with a prefix", ReplayOptions{Since: since, IntoRelayStream: true, SubjectPrefix: "replay"}, "drop --to-stream and --subject-prefix"},
		{"into with a stream", ReplayOptions{Since: since, IntoRelayStream: true, ToStream: "REBUILD"}, "drop --to-stream"},
		{"wildcard prefix", ReplayOptions{Since: since, SubjectPrefix: "replay.*"}, "no wildcards"},
		{"bad prefix", ReplayOptions{Since: since, SubjectPrefix: "replay..x"}, "--subject-prefix"},
		{"bad run id", ReplayOptions{Since: since, SubjectPrefix: "replay", RunID: "a/b"}, "--run-id"},
	} {
		err := tc.o.Check("OUTBOX")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// A stream named alone gives the copies' prefix when its one subject is
// P.>; otherwise the user names the prefix.
func TestReplayPrefixOf(t *testing.T) {
	if p, err := prefixOf("REBUILD", []string{"rebuild.v2.>"}); err != nil || p != "rebuild.v2" {
		t.Errorf("prefixOf(rebuild.v2.>) = %q, %v", p, err)
	}
	for _, subjects := range [][]string{{"a.>", "b.>"}, {"a.*"}, {"a.*.>"}, {">"}, nil} {
		if _, err := prefixOf("REBUILD", subjects); err == nil || !strings.Contains(err.Error(), "--subject-prefix") {
			t.Errorf("prefixOf(%v) = %v, want an error naming --subject-prefix", subjects, err)
		}
	}
}

// A new run id is a valid one, distinct from another started at once, and
// says when the run started.
func TestNewRunID(t *testing.T) {
	now := time.Date(2024, 5, 1, 10, 2, 3, 0, time.UTC)
	a, b := NewRunID(now), NewRunID(now)
	if err := contract.CheckRunID(a); err != nil || a == b || !strings.HasPrefix(a, "20240501T100203Z-") {
		t.Errorf("run ids %q and %q (%v)", a, b, err)
	}
}

// The filter's arguments: an open end is NULL, no aggregates is an empty
// array (never NULL, which cardinality would not count as empty).
func TestReplayWhere(t *testing.T) {
	since := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	_, args := ReplayOptions{Since: since}.where()
	if args[0] != since || args[1].(*time.Time) != nil || len(args[2].([]string)) != 0 || args[2].([]string) == nil || args[3].([]string) == nil {
		t.Errorf("args %v", args)
	}
	until := since.Add(time.Hour)
	_, args = ReplayOptions{Since: since, Until: until, AggregateIDs: []string{"42"}}.where()
	if *args[1].(*time.Time) != until || args[3].([]string)[0] != "42" {
		t.Errorf("args %v", args)
	}
}

// A resumed run skips the rows its copies hold, up to the last one, and
// refuses to go on when the row at that place is another.
func TestReplayResume(t *testing.T) {
	row := func(i uint32, id string) *decode.Event {
		return &decode.Event{ID: id, Position: decode.Position{Index: i}}
	}
	none := resumePoint{index: -1}
	if skip, err := none.skips(row(0, "a")); skip || err != nil {
		t.Errorf("a new run skipped the first row (%v)", err)
	}
	p := resumePoint{index: 1, msgID: "b"}
	for _, c := range []struct {
		ev   *decode.Event
		skip bool
	}{{row(0, "a"), true}, {row(1, "b"), true}, {row(2, "c"), false}} {
		if skip, err := p.skips(c.ev); skip != c.skip || err != nil {
			t.Errorf("row %s: skipped %v (%v), want %v", c.ev.ID, skip, err, c.skip)
		}
	}
	if _, err := p.skips(row(1, "x")); !errors.Is(err, errRowsChanged) || !strings.Contains(err.Error(), "without --run-id") {
		t.Errorf("another row at the last copy's place: %v", err)
	}
}
