package decode

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode feeds arbitrary message sequences to a Decoder: it must return
// errors, never panic, and every event it returns must be self-consistent.
// The corpus starts from hand-built messages and the captured server bytes
// in testdata/captured.
func FuzzDecode(f *testing.F) {
	rel := msgRelation(1, "public", "outbox_events", seedColumns)
	seq := [][]byte{msgBegin(0x10, 1), rel, msgInsert(1, seedRow("id", "a", "b", "c", "{}")...), msgCommit(0x10, 0x20)}
	f.Add(bytes.Join(seq, []byte{0xff, 0xfe}))
	for _, m := range seq {
		f.Add(m)
	}
	for _, stream := range append(capturedStreams(f), capturedIn(f, "messages")...) {
		f.Add(bytes.Join(stream, []byte{0xff, 0xfe}))
	}
	msgs := [][]byte{msgBegin(0x10, 1), msgMessage(true, 0x8, "outbox", envelope("m", "e", `{"a": 1}`)),
		msgMessage(true, 0x9, "outbox", `{"id": 5}`), msgMessage(false, 0xa, "outbox", "x"), msgCommit(0x10, 0x20)}
	f.Add(bytes.Join(msgs, []byte{0xff, 0xfe}))
	for _, m := range msgs {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(outbox, WithMessagePrefix("outbox"))
		for _, m := range bytes.Split(data, []byte{0xff, 0xfe}) {
			msg, err := d.Decode(m)
			if err != nil {
				continue
			}
			if msg.Kind == KindEvent && msg.Event.Problem == "" && msg.Event.ID == "" {
				t.Fatalf("event without id and without a problem: %+v", msg.Event)
			}
		}
	})
}

// capturedStreams reads testdata/captured/*.bin: each file is a sequence of
// WALData payloads received from a real Postgres, each preceded by its
// length as 4 big-endian bytes.
func capturedStreams(tb testing.TB) [][][]byte { return capturedIn(tb, "captured") }

// capturedIn reads testdata/dir/*.bin (see capturedStreams).
func capturedIn(tb testing.TB, dir string) [][][]byte {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.bin"))
	if err != nil {
		tb.Fatal(err)
	}
	var out [][][]byte
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		var msgs [][]byte
		for len(raw) >= 4 {
			n := int(raw[0])<<24 | int(raw[1])<<16 | int(raw[2])<<8 | int(raw[3])
			if n > len(raw)-4 {
				tb.Fatalf("%s: truncated record", name)
			}
			msgs = append(msgs, raw[4:4+n])
			raw = raw[4+n:]
		}
		out = append(out, msgs)
	}
	return out
}
