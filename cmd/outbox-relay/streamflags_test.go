package main

import (
	"strings"
	"testing"
	"time"
)

// TestStreamFlags: settings (sizes: contract.ByteSize) JetStream cannot have are
// refused, naming the flag.
func TestStreamFlags(t *testing.T) {
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
