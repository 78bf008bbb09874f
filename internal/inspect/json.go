package inspect

import (
	"encoding/json"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/sink"
)

// MarshalJSON writes the report as `status --json` prints it
// (docs/json.md): the relay's record and the last event in their JSON
// forms (RecordJSON, EventJSON), snake_case, LSNs as Postgres writes
// them, no zero times, nothing internal (the record's publication
// fingerprint).
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // without this method
	v := struct {
		plain
		Record    *RecordJSON `json:"record,omitempty"`
		LastEvent *EventJSON  `json:"last_event,omitempty"`
	}{plain: plain(r)}
	if r.Record != nil {
		v.Record = NewRecordJSON(*r.Record)
	}
	if r.LastEvent != nil {
		v.LastEvent = NewEventJSON(*r.LastEvent)
	}
	return json.Marshal(v)
}

// RecordJSON is the relay's record of its slot (checkpoint.Record) in
// `status --json`.
type RecordJSON struct {
	// CreatedLSN is the slot's consistent point at its creation.
	CreatedLSN string `json:"created_lsn,omitempty"`
	// ConfirmLimitLSN is a position the relay has never confirmed past.
	ConfirmLimitLSN string `json:"confirm_limit_lsn,omitempty"`
	// StoppedLSN is where the relay stopped when it last stopped cleanly.
	StoppedLSN string `json:"stopped_lsn,omitempty"`
	// InitialRowsPublished: the take-up from the slot's snapshot is done.
	InitialRowsPublished bool `json:"initial_rows_published"`
	// TakeUp is what the take-up publishes: initial or repair.
	TakeUp string `json:"take_up,omitempty"`
	// RepairSince bounds a repair to rows created at or after it.
	RepairSince *time.Time `json:"repair_since,omitempty"`
}

// NewRecordJSON is r as status --json prints it.
func NewRecordJSON(r checkpoint.Record) *RecordJSON {
	v := &RecordJSON{CreatedLSN: lsnText(r.CreatedLSN), ConfirmLimitLSN: lsnText(r.Limit), StoppedLSN: lsnText(r.Stopped),
		InitialRowsPublished: r.Bootstrapped, TakeUp: string(r.Kind)}
	if !r.RepairSince.IsZero() {
		t := r.RepairSince.UTC()
		v.RepairSince = &t
	}
	return v
}

// EventJSON is a stored message (sink.StoredEvent) in `status --json`.
type EventJSON struct {
	Seq        uint64    `json:"stream_seq"`
	StoredAt   time.Time `json:"stored_at,omitzero"`
	Subject    string    `json:"subject"`
	ID         string    `json:"id"`
	CommitLSN  string    `json:"commit_lsn,omitempty"`
	Index      uint32    `json:"index_in_commit"`
	DeadLetter bool      `json:"dead_letter"`
	// Reason is why a dead letter was sent.
	Reason        string      `json:"reason,omitempty"`
	Table         string      `json:"table,omitempty"`
	AggregateType string      `json:"aggregate_type,omitempty"`
	AggregateID   string      `json:"aggregate_id,omitempty"`
	CreatedAt     string      `json:"created_at,omitempty"`
	RowID         string      `json:"row_id,omitempty"`
	Source        *SourceJSON `json:"source,omitempty"`
}

// SourceJSON is where a message says it comes from (sink.Source).
type SourceJSON struct {
	System    string `json:"system_identifier,omitempty"`
	Database  string `json:"database,omitempty"`
	Table     string `json:"table,omitempty"`
	Slot      string `json:"slot,omitempty"`
	Timeline  uint32 `json:"timeline,omitempty"`
	OriginLSN string `json:"slot_origin_lsn,omitempty"`
}

// NewEventJSON is e as status --json prints it.
func NewEventJSON(e sink.StoredEvent) *EventJSON {
	v := &EventJSON{Seq: e.Seq, StoredAt: e.Time.UTC(), Subject: e.Subject, ID: e.ID, CommitLSN: lsnText(e.Position.CommitLSN),
		Index: e.Position.Index, DeadLetter: e.DeadLetter, Reason: e.Reason, Table: e.Table,
		AggregateType: e.AggregateType, AggregateID: e.AggregateID, CreatedAt: e.CreatedAt, RowID: e.RowID}
	if s := e.Source; s != (sink.Source{}) {
		v.Source = &SourceJSON{System: s.System, Database: s.Database, Table: s.Table, Slot: s.Slot, Timeline: s.Timeline, OriginLSN: lsnText(s.Origin)}
	}
	if e.Time.IsZero() {
		v.StoredAt = time.Time{}
	}
	return v
}

// lsnText is an LSN as Postgres writes it, "" for none.
func lsnText(l pglogrepl.LSN) string {
	if l == 0 {
		return ""
	}
	return l.String()
}
