package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// TestStatusPrintsNoRoom: a stream without room shows as a "no room" line
// with the limit, a "fix" line with the nats command, and a problem; the
// JSON form carries the same under "blocked".
func TestStatusPrintsNoRoom(t *testing.T) {
	b := &jetstream.Blocked{Stream: "OUTBOX", Reason: jetstream.RoomMaxBytes,
		What: `stream "OUTBOX" holds 1.0 MiB, its max_bytes is 1.0 MiB`, Fix: "raise max_bytes: nats stream edit OUTBOX --max-bytes 2097152"}
	r := inspect.Report{Slot: "outbox_relay", Exists: true, Stream: "OUTBOX", Blocked: b,
		Problems: []string{`stream "OUTBOX" has no room for the relay's next event (max_bytes)`}}
	var out bytes.Buffer
	printStatus(&out, r)
	for _, want := range []string{"no room            max_bytes: " + b.What, "fix                " + b.Fix, "PROBLEM            " + r.Problems[0]} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Blocked *jetstream.Blocked `json:"blocked"`
	}
	if err := json.Unmarshal(raw, &back); err != nil || back.Blocked == nil || *back.Blocked != *b {
		t.Errorf("--json: %s", raw)
	}
}
