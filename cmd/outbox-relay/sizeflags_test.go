package main

import (
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestByteSizeFlags: every byte-sized flag takes units (contract.ByteSize)
// and refuses a negative or malformed size, naming the flag.
func TestByteSizeFlags(t *testing.T) {
	parse := func(args ...string) (*cli, error) {
		var c cli
		p, err := kong.New(&c, vars())
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Parse(args)
		return &c, err
	}
	for _, f := range []struct {
		cmd, flag string
		got       func(*cli) int64
	}{
		{"run", "--window-bytes", func(c *cli) int64 { return int64(c.Run.WindowBytes) }},
		{"run", "--stream-max-bytes", func(c *cli) int64 { return int64(c.Run.StreamMaxBytes) }},
		{"doctor", "--stream-max-bytes", func(c *cli) int64 { return int64(c.Doctor.StreamMaxBytes) }},
		{"status", "--max-lag-bytes", func(c *cli) int64 { return int64(c.Status.MaxLagBytes) }},
	} {
		for in, want := range map[string]int64{"64MiB": 64 << 20, "1k": 1 << 10, "1KB": 1000, "2097152": 2 << 20} {
			c, err := parse(f.cmd, f.flag+"="+in)
			if err != nil || f.got(c) != want {
				t.Errorf("%s %s=%s: %d, %v; want %d", f.cmd, f.flag, in, f.got(c), err, want)
			}
		}
		for _, in := range []string{"-1", "12XB", "1.5GB"} {
			if _, err := parse(f.cmd, f.flag+"="+in); err == nil || !strings.Contains(err.Error(), f.flag) {
				t.Errorf("%s %s=%s: error %v, want one naming %s", f.cmd, f.flag, in, err, f.flag)
			}
		}
	}
	c, err := parse("run")
	if err != nil || c.Run.WindowBytes.String() != "64MiB" {
		t.Errorf("run's default --window-bytes is %s (%v), want 64MiB", c.Run.WindowBytes, err)
	}
}
