package main

import (
	"strings"
	"testing"
	"time"
)

// TestStreamFlags: sizes take units; settings JetStream cannot have are
// refused, naming the flag.
func TestStreamFlags(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "10GiB": 10 << 30, "500MB": 500e6, "2kb": 2000, "3K": 3 << 10, " 7 MiB ": 7 << 20} {
		var b byteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || int64(b) != want {
			t.Errorf("byteSize(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "1.5GB", "-", "10XB", "99999999999TiB"} {
		var b byteSize
		if err := b.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("byteSize(%q) = %d, want an error", in, b)
		}
	}
	ok := streamFlags{StreamReplicas: 3, StreamStorage: "file", StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 30, StreamDiscard: "old"}
	s, err := ok.settings()
	if err != nil || s.Replicas != 3 || s.MaxAge != time.Hour || s.MaxBytes != 1<<30 || !s.DiscardOld {
		t.Errorf("settings() = %+v, %v", s, err)
	}
	for flag, f := range map[string]streamFlags{
		"--stream-replicas": {StreamReplicas: 7},
		"--stream-max-age":  {StreamReplicas: 1, StreamMaxAge: time.Millisecond},
		"--stream-max-msgs": {StreamReplicas: 1, StreamMaxMsgs: -2},
	} {
		if _, err := f.settings(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: error %v, want one naming %s", f, err, flag)
		}
	}
}
