package contract

import "testing"

// A copy's id names its run and the original's message id, so that it is
// never taken for the original nor for another run's copy, and splits
// back into both (also a qualified id, which holds a '/').
func TestReplayMsgID(t *testing.T) {
	for _, tc := range []struct{ run, id, want string }{
		{"r1", "42", "replay/r1/42"},
		{"20240102T030405Z-ab12", "public.orders_outbox/7", "replay/20240102T030405Z-ab12/public.orders_outbox/7"},
	} {
		got := ReplayMsgID(tc.run, tc.id)
		if got != tc.want {
			t.Errorf("ReplayMsgID(%q, %q) = %q, want %q", tc.run, tc.id, got, tc.want)
		}
		run, id, ok := SplitReplayMsgID(got)
		if !ok || run != tc.run || id != tc.id {
			t.Errorf("SplitReplayMsgID(%q) = %q, %q, %v", got, run, id, ok)
		}
	}
	for _, bad := range []string{"42", "replay/", "replay/r1", "replay/r1/", "replay/r 1/42", "dead-letter:replay/r1/42"} {
		if _, _, ok := SplitReplayMsgID(bad); ok {
			t.Errorf("SplitReplayMsgID(%q) ok, want not a copy's id", bad)
		}
	}
}

func TestCheckRunID(t *testing.T) {
	for _, good := range []string{"a", "rebuild-2024_01", "20240102T030405Z-ab12"} {
		if err := CheckRunID(good); err != nil {
			t.Errorf("CheckRunID(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", "a/b", "a.b", "a b", "é", string(make([]byte, 65))} {
		if err := CheckRunID(bad); err == nil {
			t.Errorf("CheckRunID(%q) = nil, want an error", bad)
		}
	}
}
