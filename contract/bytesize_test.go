package contract

import (
	"strings"
	"testing"
)

// TestByteSize: sizes take units, print with units and read back;
// negative and malformed sizes are refused.
func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "10GiB": 10 << 30, "500MB": 500e6, "2kb": 2000, "1KB": 1000,
		"1k": 1 << 10, "3K": 3 << 10, " 7 MiB ": 7 << 20, "64MiB": 64 << 20, "12B": 12} {
		b, err := ParseByteSize(in)
		if err != nil || int64(b) != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, b, err, want)
		}
		if back, err := ParseByteSize(b.String()); err != nil || back != b {
			t.Errorf("%q prints as %q, which reads back as %d, %v", in, b.String(), back, err)
		}
	}
	for _, in := range []string{"", "GiB", "1.5GB", "-", "10XB", "99999999999TiB", "-1", "-5MiB"} {
		if b, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, b)
		}
	}
	if _, err := ParseByteSize("-1"); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("ParseByteSize(-1): %v, want one saying negative", err)
	}
	for b, want := range map[ByteSize]string{0: "0", 64 << 20: "64MiB", 1536: "1536B", 1000: "1000B", 3 << 40: "3TiB", 1 << 10: "1KiB"} {
		if got := b.String(); got != want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(b), got, want)
		}
	}
}
