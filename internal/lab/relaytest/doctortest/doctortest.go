// Package doctortest runs `outbox-relay doctor --json` for the tests of
// the binary and reads its report. It is apart from relaytest because
// package doctor imports relay and poll, whose own tests import relaytest.
package doctortest

import (
	"encoding/json"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// Run runs bin's doctor --json against env and parses its report; it also
// returns the exit code and the output (stdout, then stderr).
func Run(t testing.TB, bin relaytest.Binary, env *relaytest.Env, extra ...string) (doctor.Report, int, string) {
	t.Helper()
	out, errOut, code := bin.RunSplit(t, append(append([]string{"doctor", "--json"}, env.ToolArgs()...), extra...)...)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json does not parse (%v):\n%s\n%s", err, out, errOut)
	}
	return rep, code, out + errOut
}

// FindingOf returns the findings of check with severity sev.
func FindingOf(rep doctor.Report, check string, sev doctor.Severity) []doctor.Finding {
	var out []doctor.Finding
	for _, f := range rep.Findings {
		if f.Check == check && f.Severity == sev {
			out = append(out, f)
		}
	}
	return out
}
