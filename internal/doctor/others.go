package doctor

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// readOthers reads the other slots recorded in the records table, when it
// exists: a problem reading them becomes a finding, not a failure.
func readOthers(ctx context.Context, pool *pgxpool.Pool, o PGOptions, f *pgFacts) {
	if len(f.Grants.Relay) == 0 || !f.Grants.Relay[0].Exists || !f.Grants.Relay[0].Granted {
		return // said by the grant findings
	}
	others, err := checkpoint.NewStore(pool, o.Table.Schema, o.Slot).OtherSlots(ctx, pool)
	if err != nil {
		f.OthersErr = err.Error()
		return
	}
	f.Others = others
}

// otherSlotFindings judges the other slots recorded in the records table.
// Another slot of the table that a relay streams from makes a relay on
// this slot refuse to start (one table, one relay); one that nothing
// streams from keeps WAL for nobody (a renamed --slot, an earlier
// deployment): the fix drops it. Idle slots of other tables are worth
// knowing (their relay may be down) but this relay's doctor leaves them
// to theirs. A relay of several tables is judged for each of them: another
// slot serving any of its tables counts (see checkpoint.SlotTables).
func otherSlotFindings(f pgFacts, o PGOptions) []Finding {
	const check = "postgres.other_slots"
	if f.OthersErr != "" {
		return []Finding{problem(Warn, check, "outbox-relay migrate", "cannot read the other slots recorded in %s.%s: %s", o.Table.Schema, checkpoint.RecordsTable, f.OthersErr)}
	}
	var out []Finding
	for _, s := range f.Others {
		table, serves := s.ServesAny(o.tables())
		switch {
		case serves && s.Active:
			out = append(out, problem(Error, check,
				fmt.Sprintf("run one relay per table: use --slot %s (this relay then waits as its standby), or stop the relay of slot %q first and drop its slot: %s", s.Slot, s.Slot, s.DropSQL(o.Table.Schema)),
				"slot %q streams %s (pid %d): a relay on slot %q would refuse to start, as both would publish every event", s.Slot, table, s.ActivePID, o.Slot))
		case serves && s.Idle():
			out = append(out, problem(Warn, check, s.DropSQL(o.Table.Schema),
				"slot %q, recorded for %s too, exists and no relay streams from it: Postgres keeps %s of WAL for it (wal_status %s); drop it if no relay will use it again",
				s.Slot, table, HumanBytes(s.RetainedBytes), s.WALStatus))
		case s.Idle():
			table := s.Table
			if table == "" {
				table = "a table not recorded"
			}
			out = append(out, info(check, "slot %q (%s), recorded in %s.%s, is idle and keeps %s of WAL; if no relay will use it again: %s",
				s.Slot, table, o.Table.Schema, checkpoint.RecordsTable, HumanBytes(s.RetainedBytes), s.DropSQL(o.Table.Schema)))
		}
	}
	if len(out) == 0 {
		out = append(out, ok(check, "no other slot recorded for %s keeps WAL or streams it", o.tableNames()))
	}
	return out
}
