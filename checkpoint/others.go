package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/replication"
)

// OtherSlot is a slot another relay recorded in the same records table
// (outbox_relay_slots, in the outbox table's schema), with its state in
// Postgres. A slot of the same table that is active means another relay
// streams the table (a second one would publish every event again); one
// that is idle keeps WAL for nobody once no relay will use it again.
type OtherSlot struct {
	Slot string `json:"slot"`
	// Table is the outbox table the record says the slot serves, or the
	// tables of a relay of several, comma-separated (see SlotTables); ""
	// when it was recorded by a relay older than that column.
	Table     string `json:"table,omitempty"`
	Exists    bool   `json:"exists"`
	Active    bool   `json:"active"`
	ActivePID int32  `json:"active_pid,omitempty"`
	// RetainedBytes is the WAL the server keeps for the slot.
	RetainedBytes int64  `json:"retained_bytes"`
	WALStatus     string `json:"wal_status,omitempty"`
}

// Idle reports whether the slot exists and nothing streams from it.
func (o OtherSlot) Idle() bool { return o.Exists && !o.Active }

// Serves reports whether the record says the slot serves table (alone, or
// among the tables of a relay of several).
func (o OtherSlot) Serves(table contract.Table) bool {
	return slices.Contains(strings.Split(o.Table, ","), table.String())
}

// ServesAny returns the first of tables the record says the slot serves;
// ok is false when it serves none of them.
func (o OtherSlot) ServesAny(tables []contract.Table) (table contract.Table, ok bool) {
	for _, t := range tables {
		if o.Serves(t) {
			return t, true
		}
	}
	return contract.Table{}, false
}

// DropSQL is the SQL that drops the slot and its record in schema's
// records table: for a slot no relay will use again (it keeps WAL).
func (o OtherSlot) DropSQL(schema string) string {
	lit := "'" + strings.ReplaceAll(o.Slot, "'", "''") + "'"
	return fmt.Sprintf("SELECT pg_drop_replication_slot(%s); DELETE FROM %s WHERE slot_name = %s;",
		lit, pgx.Identifier{schema, RecordsTable}.Sanitize(), lit)
}

// OtherSlots returns the slots recorded in the store's records table
// other than its own, each with its state read from slots (the server
// that holds them: the relay's --pg-url), in name order. A record whose
// slot no longer exists is listed with Exists false.
func (s *Store) OtherSlots(ctx context.Context, slots *pgxpool.Pool) ([]OtherSlot, error) {
	var names, tables []string
	err := s.db.QueryRow(ctx, `SELECT coalesce(array_agg(slot_name ORDER BY slot_name), '{}'),
			coalesce(array_agg(coalesce(outbox_table, '') ORDER BY slot_name), '{}')
		FROM `+s.table+` WHERE slot_name <> $1`, s.slot).Scan(&names, &tables)
	if denied(err) {
		return nil, deniedError(fmt.Errorf("read the other slots recorded in %s: %w", s.table, err))
	}
	if err != nil {
		return nil, fmt.Errorf("read the other slots recorded in %s (run `outbox-relay migrate` if it is older than the relay): %w", s.table, err)
	}
	out := make([]OtherSlot, 0, len(names))
	for i, name := range names {
		info, err := replication.LookupSlot(ctx, slots, name)
		if err != nil {
			return nil, err
		}
		out = append(out, OtherSlot{Slot: name, Table: tables[i], Exists: info.Exists, Active: info.Active, ActivePID: info.ActivePID,
			RetainedBytes: info.RetainedBytes, WALStatus: info.WALStatus})
	}
	return out, nil
}
