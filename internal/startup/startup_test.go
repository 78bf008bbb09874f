package startup

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestTraceLogsOnceWithEveryPhase(t *testing.T) {
	var out bytes.Buffer
	origin := time.Now().Add(-50 * time.Millisecond)
	tr := New(origin, zerolog.New(&out).Level(zerolog.DebugLevel))
	ctx := NewContext(context.Background(), tr)
	end := Phase(ctx, "pg_pool")
	end()
	tr.Since("cli", origin)
	tr.Finish("first PubAck")
	Phase(ctx, "late")() // after the start-up: not part of it
	tr.Finish("again")

	var lines []string
	for l := range strings.Lines(out.String()) {
		if strings.Contains(l, `"message":"start-up took"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("logged %d start-up lines, want one:\n%s", len(lines), out.String())
	}
	if strings.Contains(out.String(), "late") {
		t.Errorf("logged a phase that ended after the start-up:\n%s", out.String())
	}
	for _, want := range []string{`"message":"start-up took"`, `"until":"first PubAck"`, `"pg_pool":"`, `"cli":"`, ` at 0s"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line %s lacks %s", lines[0], want)
		}
	}
	if !tr.Done() {
		t.Error("Done is false after Finish")
	}
}

func TestNilTraceIsANoOp(t *testing.T) {
	ctx := context.Background()
	Phase(ctx, "x")()
	var tr *Trace
	tr.Since("x", time.Now())
	tr.Finish("x")
	if !tr.Done() {
		t.Error("a nil trace should count as done: nothing to time")
	}
}

func TestDebugLinePerPhase(t *testing.T) {
	var out bytes.Buffer
	tr := New(time.Now(), zerolog.New(&out).Level(zerolog.DebugLevel))
	tr.Phase("repl_open")()
	if !strings.Contains(out.String(), `"phase":"repl_open"`) {
		t.Errorf("no debug line for the phase: %s", out.String())
	}
}
