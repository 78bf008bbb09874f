package relay

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestParseForkPoint(t *testing.T) {
	hist := []byte("1\t0/3000148\tno recovery target specified\n\n2\t0/5A1B2C0\tno recovery target specified\n")
	for _, c := range []struct {
		from uint32
		want pglogrepl.LSN
		ok   bool
	}{
		{1, 0x3000148, true},
		{2, 0x5A1B2C0, true},
		{3, 0, false},
	} {
		got, ok := parseForkPoint(hist, c.from)
		if got != c.want || ok != c.ok {
			t.Errorf("parseForkPoint(from %d) = %s, %v; want %s, %v", c.from, got, ok, c.want, c.ok)
		}
	}
	if _, ok := parseForkPoint([]byte("# comment\n1\tnot-an-lsn\tx\n"), 1); ok {
		t.Error("parseForkPoint accepted a bad switch point")
	}
}
