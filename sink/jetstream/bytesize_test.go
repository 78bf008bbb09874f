package jetstream

import "testing"

// TestParseByteSize: sizes take units of 1000 or 1024, in any case, with
// spaces; fractions, negative or unknown units and overflows are refused.
func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "10GiB": 10 << 30, "500MB": 500e6, "2kb": 2000, "3K": 3 << 10, " 7 MiB ": 7 << 20, "5B": 5} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "1.5GB", "-", "10XB", "99999999999TiB"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, got)
		}
	}
}
