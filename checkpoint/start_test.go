package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/contract"
)

func TestDecide(t *testing.T) {
	rec := func(created, limit uint64, boot bool) Record {
		return Record{Exists: true, CreatedLSN: lsn(created), Limit: lsn(limit), Bootstrapped: boot, Kind: KindInitial}
	}
	stopped := func(created, limit, at uint64) Record {
		r := rec(created, limit, true)
		r.Stopped = lsn(at)
		return r
	}
	repair := func(created uint64) Record {
		return Record{Exists: true, CreatedLSN: lsn(created), Limit: lsn(created), Kind: KindRepair}
	}
	cases := []struct {
		name  string
		state SlotState
		want  Action
		gap   string // substring of the GapError, "" when no error
	}{
		{"first start", SlotState{}, Bootstrap, ""},
		{"first start but stream has events", SlotState{StreamCount: 5}, 0, "no record of one"},
		{"normal restart", SlotState{Exists: true, Confirmed: lsn(0x200), Record: rec(0x100, 0x300, true)}, Resume, ""},
		{"slot exactly at the limit", SlotState{Exists: true, Confirmed: lsn(0x300), Record: rec(0x100, 0x300, true)}, Resume, ""},
		{"slot within the slack", SlotState{Exists: true, Confirmed: lsn(0x300 + Slack), Record: rec(0x100, 0x300, true)}, Resume, ""},
		{"slot beyond the limit (recreated)", SlotState{Exists: true, Confirmed: lsn(0x301 + Slack), Record: rec(0x100, 0x300, true)}, 0, "beyond anything"},
		{"slot where the relay stopped cleanly", SlotState{Exists: true, Confirmed: lsn(0x280), Record: stopped(0x100, 0x300, 0x280)}, Resume, ""},
		{"slot behind where the relay stopped (Postgres crashed since)", SlotState{Exists: true, Confirmed: lsn(0x200), Record: stopped(0x100, 0x300, 0x280)}, Resume, ""},
		{"slot moved past a clean stop, within the slack", SlotState{Exists: true, Confirmed: lsn(0x281), Record: stopped(0x100, 0x300, 0x280)}, 0, "beyond where this relay stopped"},
		{"slot dropped", SlotState{Record: rec(0x100, 0x300, true)}, 0, "was dropped"},
		{"slot dropped during bootstrap", SlotState{Record: rec(0x100, 0x100, false)}, RedoBootstrap, ""},
		{"crash during bootstrap", SlotState{Exists: true, Confirmed: lsn(0x100), Record: rec(0x100, 0x100, false)}, RedoBootstrap, ""},
		{"bootstrap unfinished but slot moved", SlotState{Exists: true, Confirmed: lsn(0x180), Record: rec(0x100, 0x100, false)}, 0, "never finished"},
		{"slot made by an operator, empty stream", SlotState{Exists: true, Confirmed: lsn(0x100)}, Adopt, ""},
		{"unknown slot, stream has events", SlotState{Exists: true, Confirmed: lsn(0x100), StreamCount: 3}, 0, "no record of it"},
		{"invalidated slot", SlotState{Exists: true, Lost: true, Record: rec(0x100, 0x300, true)}, 0, "invalidated"},
		{"crash before the slot's creation was recorded", SlotState{Exists: true, Confirmed: lsn(0x180), Record: rec(0, 0, false)}, RedoBootstrap, ""},
		{"invalidated during bootstrap", SlotState{Exists: true, Lost: true, Confirmed: lsn(0x100), Record: rec(0x100, 0x100, false)}, RedoBootstrap, ""},
		{"crash during a repair", SlotState{Exists: true, Confirmed: lsn(0x100), Record: repair(0x100)}, RedoRepair, ""},
		{"crash during a repair, slot moved", SlotState{Exists: true, Confirmed: lsn(0x900), Record: repair(0x100)}, RedoRepair, ""},
		{"crash during a repair, slot dropped", SlotState{StreamCount: 9, Record: repair(0)}, RedoRepair, ""},
		{"crash during a repair, slot lost", SlotState{Exists: true, Lost: true, Record: repair(0x100)}, RedoRepair, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.state.Name = "outbox_relay"
			got, err := Decide(tc.state)
			if tc.gap == "" {
				if err != nil || got != tc.want {
					t.Fatalf("Decide = %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			var gap *GapError
			if !errors.As(err, &gap) || !strings.Contains(gap.What, tc.gap) {
				t.Fatalf("Decide error = %v; want a GapError about %q", err, tc.gap)
			}
			if !errors.Is(err, contract.ErrGap) {
				t.Errorf("errors.Is(%v, contract.ErrGap) = false", err)
			}
			if strings.Contains(err.Error(), "--") {
				t.Errorf("error names a command-line flag: %v", err)
			}
		})
	}
}
