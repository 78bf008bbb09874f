package contract

import "testing"

func TestPercentDecode(t *testing.T) {
	for in, want := range map[string]string{"a%20b": "a b", "%0A%25": "\n%", "100%": "100%", "%zz": "%zz", "%4": "%4", "plain": "plain"} {
		if got := PercentDecode(in); got != want {
			t.Errorf("PercentDecode(%q) = %q, want %q", in, got, want)
		}
	}
}
