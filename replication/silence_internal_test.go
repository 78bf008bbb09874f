package replication

import (
	"testing"
	"time"
)

func TestParseMillis(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "0", want: 0},
		{in: "1min", want: time.Minute},
		{in: "5s", want: 5 * time.Second},
		{in: "1500ms", want: 1500 * time.Millisecond},
		{in: "90", want: 90 * time.Millisecond},
		{in: "2h", want: 2 * time.Hour},
		{in: "1d", want: 24 * time.Hour},
		{in: "", bad: true},
		{in: "s", bad: true},
		{in: "-1", bad: true},
		{in: "1.5s", bad: true},
		{in: "5 weeks", bad: true},
		{in: "99999999d", bad: true},
	}
	for _, c := range cases {
		got, err := parseMillis(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("parseMillis(%q) = %s, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseMillis(%q) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}

func TestSilenceLimits(t *testing.T) {
	cases := []struct {
		timeout, ask, dead time.Duration
	}{
		{timeout: time.Minute, ask: 10 * time.Second, dead: 90 * time.Second}, // Postgres' default
		{timeout: 5 * time.Second, ask: 2500 * time.Millisecond, dead: 7500 * time.Millisecond},
		{timeout: time.Second, ask: 500 * time.Millisecond, dead: 3 * time.Second},
		{timeout: 0, ask: 10 * time.Second, dead: 0}, // the server never times out: never presume death
	}
	for _, c := range cases {
		ask, dead := silenceLimits(c.timeout)
		if ask != c.ask || dead != c.dead {
			t.Errorf("silenceLimits(%s) = %s, %s; want %s, %s", c.timeout, ask, dead, c.ask, c.dead)
		}
		// Never give up before the walsender itself would have.
		if dead != 0 && dead <= c.timeout {
			t.Errorf("silenceLimits(%s): gives up after %s, before wal_sender_timeout", c.timeout, dead)
		}
	}
}
