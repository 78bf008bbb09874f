package poll

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	for _, c := range []struct {
		attempt   int
		base, max time.Duration
		want      time.Duration
	}{
		{1, time.Second, time.Minute, time.Second},
		{2, time.Second, time.Minute, 2 * time.Second},
		{4, time.Second, time.Minute, 8 * time.Second},
		{7, time.Second, time.Minute, time.Minute},
		{1000, time.Second, time.Minute, time.Minute},
		{0, time.Second, time.Minute, time.Second},
		{3, 100 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond},
	} {
		if got := Delay(c.attempt, c.base, c.max); got != c.want {
			t.Errorf("Delay(%d, %s, %s) = %s, want %s", c.attempt, c.base, c.max, got, c.want)
		}
	}
}
