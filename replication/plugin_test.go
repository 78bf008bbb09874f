package replication

import "testing"

func TestServerMajor(t *testing.T) {
	for v, want := range map[string]int{
		"15.4 (Debian 15.4-1.pgdg120+1)": 15, "14beta1": 14, "13.23": 13, "18devel": 18, "9.6.24": 9, "": 0, "x": 0,
	} {
		if got := serverMajor(v); got != want {
			t.Errorf("serverMajor(%q) = %d, want %d", v, got, want)
		}
	}
}
