// Package doctor checks, read-only, that Postgres and NATS are set up for
// the relay, and says for each problem the SQL or nats command that fixes
// it. It gathers facts from the servers, then judges them with pure
// functions (tested without servers); the knowledge of what the relay
// needs stays in the packages that own it (replication.Preflight,
// jetstream.CheckStream), which doctor asks rather than repeats.
//
// CheckPostgres judges a database for the WAL relay; CheckPostgresPoll for
// the polling relay (run --source poll), which needs none of the
// replication settings but the polling setup, the claims table and the
// rights to update rows and take advisory locks.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Severity says how much a finding matters.
type Severity string

const (
	OK    Severity = "ok"
	Info  Severity = "info" // worth knowing, nothing to fix
	Warn  Severity = "warn" // works, but at a risk or a cost the fix removes
	Error Severity = "error"
)

// Finding is the result of one check.
type Finding struct {
	// Check names what was checked: "postgres.wal_level", "nats.stream".
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`
	// Fix is the SQL or command that removes the problem.
	Fix string `json:"fix,omitempty"`
}

// Report is every finding of a run.
type Report struct {
	Findings []Finding `json:"findings"`
	Errors   int       `json:"errors"`
	Warnings int       `json:"warnings"`
}

// MarshalJSON writes the report as `doctor --json` prints it
// (docs/json.md): findings [] rather than null when there are none.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // without this method
	p := plain(r)
	if p.Findings == nil {
		p.Findings = []Finding{}
	}
	return json.Marshal(p)
}

// Add appends findings and counts them.
func (r *Report) Add(fs ...Finding) {
	for _, f := range fs {
		switch f.Severity {
		case Error:
			r.Errors++
		case Warn:
			r.Warnings++
		}
		r.Findings = append(r.Findings, f)
	}
}

// Failed reports whether the run should exit non-zero: any error, or any
// warning when failOnWarn.
func (r Report) Failed(failOnWarn bool) bool {
	return r.Errors > 0 || (failOnWarn && r.Warnings > 0)
}

// Print writes the report for people: one line per finding, its fix
// indented below it, and a summary.
func (r Report) Print(w io.Writer) {
	for _, f := range r.Findings {
		fmt.Fprintf(w, "%-5s  %-33s %s\n", strings.ToUpper(string(f.Severity)), f.Check, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(w, "       %-33s fix: %s\n", "", f.Fix)
		}
	}
	fmt.Fprintf(w, "\n%d errors, %d warnings\n", r.Errors, r.Warnings)
}

func ok(check, format string, args ...any) Finding {
	return Finding{Check: check, Severity: OK, Message: fmt.Sprintf(format, args...)}
}

func info(check, format string, args ...any) Finding {
	return Finding{Check: check, Severity: Info, Message: fmt.Sprintf(format, args...)}
}

func problem(sev Severity, check, fix, format string, args ...any) Finding {
	return Finding{Check: check, Severity: sev, Message: fmt.Sprintf(format, args...), Fix: fix}
}
