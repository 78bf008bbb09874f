package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/contract"
)

func TestClassify(t *testing.T) {
	s := &Stream{cfg: Config{Repl: &pgconn.Config{User: "relay", Database: "app"}}}
	pg := func(code string) error {
		return fmt.Errorf("start replication: %w", &pgconn.PgError{Code: code, Message: "server says " + code})
	}
	type want int
	const (
		transient want = iota
		busy
		fatalOnly
		gapFatal
	)
	cases := []struct {
		name string
		err  error
		want want
		hint string // substring of the FatalError's hint
	}{
		{"slot or publication dropped", pg(codeUndefinedObject), gapFatal, "restore the publication"},
		{"slot invalidated", pg(codeNotInPrerequisite), gapFatal, "may be missing"},
		{"slot busy", pg(codeObjectInUse), busy, ""},
		{"no REPLICATION", pg(codeInsufficientPriv), fatalOnly, "ALTER ROLE relay REPLICATION"},
		{"bad password", pg(codeInvalidPassword), fatalOnly, "pg_hba.conf"},
		{"no such database", pg(codeInvalidCatalogName), fatalOnly, "database name in the connection string"},
		{"server shutting down", pg(codeAdminShutdown), transient, ""},
		{"not a server error", errors.New("connection reset"), transient, ""},
		{"canceled", context.Canceled, transient, ""},
		{"already a gap", gap(errors.New("x"), "y"), gapFatal, "y"},
		{"already fatal", fatal(errors.New("x"), "y"), fatalOnly, "y"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.classify(tc.err)
			var fe *contract.FatalError
			isFatal := errors.As(err, &fe)
			isGap := errors.Is(err, contract.ErrGap)
			switch tc.want {
			case transient:
				if err != tc.err {
					t.Fatalf("classify = %v; want the error unchanged", err)
				}
			case busy:
				if !errors.Is(err, errSlotBusy) || isFatal {
					t.Fatalf("classify = %v; want errSlotBusy", err)
				}
			case fatalOnly:
				if !isFatal || isGap {
					t.Fatalf("classify = %v (fatal %v, gap %v); want fatal, not a gap", err, isFatal, isGap)
				}
			case gapFatal:
				if !isFatal || !isGap {
					t.Fatalf("classify = %v (fatal %v, gap %v); want a fatal gap", err, isFatal, isGap)
				}
			}
			if tc.hint != "" && !strings.Contains(fe.Hint, tc.hint) {
				t.Errorf("hint %q; want it to mention %q", fe.Hint, tc.hint)
			}
			if err != nil && strings.Contains(err.Error(), "--") {
				t.Errorf("error names a command-line flag: %v", err)
			}
		})
	}
}

func TestCheckSlot(t *testing.T) {
	ok := SlotInfo{Exists: true, Plugin: "pgoutput", Database: "app", WALStatus: "reserved", ConfirmedFlush: 0x1000}
	with := func(change func(*SlotInfo)) SlotInfo {
		info := ok
		change(&info)
		return info
	}
	cases := []struct {
		name      string
		info      SlotInfo
		fatal     bool
		gap       bool
		errSubstr string
	}{
		{"usable", ok, false, false, ""},
		{"other plugin", with(func(i *SlotInfo) { i.Plugin = "wal2json" }), true, false, `output plugin "wal2json"`},
		{"physical slot", with(func(i *SlotInfo) { i.Plugin, i.Database = "", "" }), true, false, `output plugin ""`},
		{"temporary", with(func(i *SlotInfo) { i.Temporary = true }), true, false, "temporary"},
		{"other database", with(func(i *SlotInfo) { i.Database = "other" }), true, false, `belongs to database "other"`},
		{"invalidated", with(func(i *SlotInfo) { i.WALStatus = "lost" }), true, true, "0/1000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSlot(tc.info, "outbox_relay", "app")
			var fe *contract.FatalError
			if got := errors.As(err, &fe); got != tc.fatal {
				t.Fatalf("CheckSlot = %v; fatal %v, want %v", err, got, tc.fatal)
			}
			if got := errors.Is(err, contract.ErrGap); got != tc.gap {
				t.Fatalf("CheckSlot = %v; errors.Is(contract.ErrGap) = %v, want %v", err, got, tc.gap)
			}
			if err != nil && (!strings.Contains(err.Error(), tc.errSubstr) || strings.Contains(err.Error(), "--")) {
				t.Errorf("CheckSlot = %v; want it to mention %q and no command-line flag", err, tc.errSubstr)
			}
		})
	}
}
