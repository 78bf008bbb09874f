// Package decode turns pgoutput messages (protocol version 1, streaming off)
// into outbox events.
//
// It is pure: bytes in, typed values out, no connection and no logger. A
// Decoder holds the state the protocol needs: the relation cache (a Relation
// message describes a table once, later messages refer to it by OID) and the
// open transaction (BEGIN … COMMIT). Columns are found by name, never by
// position alone, and every message is checked: a malformed one is an error,
// never a panic and never a silently skipped row.
//
// With protocol version 1 Postgres sends a transaction only after it
// committed, so every Event a Decoder returns belongs to a committed
// transaction; rolled-back work never reaches it. With WithMessagePrefix,
// transactional logical messages with that prefix are events too
// (table-less events, see message.go).
package decode

import (
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Kind says what a decoded message means to the relay.
type Kind uint8

const (
	// KindSkip: nothing to do (relation and type descriptions, origins,
	// logical messages with another prefix, inserts into tables other than
	// the outbox).
	KindSkip Kind = iota
	// KindBegin: a transaction starts; CommitLSN and CommitTime are set.
	KindBegin
	// KindEvent: an insert into the outbox table, or a transactional
	// logical message with the Decoder's prefix; Event is set.
	KindEvent
	// KindCommit: the transaction ends; CommitLSN and EndLSN are set.
	KindCommit
	// KindIgnored: a change the relay does not publish (UPDATE, DELETE or
	// TRUNCATE of the outbox table, a non-transactional message with the
	// Decoder's prefix); Ignored describes it.
	KindIgnored
)

// Message is one decoded pgoutput message.
type Message struct {
	Kind  Kind
	Event Event
	// CommitLSN is the LSN of the transaction's commit record.
	CommitLSN pglogrepl.LSN
	// EndLSN is the end of the commit record: once every event of the
	// transaction is published, this is the position to confirm.
	EndLSN     pglogrepl.LSN
	CommitTime time.Time
	Ignored    string
	// Hint, for some ignored changes, says what to do about them.
	Hint string
}

// Decoder decodes the messages of one replication session, in order.
// Start a new Decoder for every session: Postgres resends relation
// descriptions on each START_REPLICATION.
type Decoder struct {
	tables    []contract.Table
	relations map[uint32]*relation
	inTxn     bool
	commitLSN pglogrepl.LSN
	// commitTime is the open transaction's commit timestamp, from its
	// BEGIN: with protocol version 1 the transaction has committed already.
	commitTime time.Time
	index      uint32   // of the next event in the transaction, inserts and messages alike
	values     [][]byte // reused tuple buffer
	prefix     string   // of logical messages that are events; "" for none
}

// NewDecoder returns a Decoder that reports inserts into table as events
// (and into more tables, WithTables; and logical messages,
// WithMessagePrefix).
func NewDecoder(table contract.Table, opts ...Option) *Decoder {
	d := &Decoder{tables: []contract.Table{table}, relations: make(map[uint32]*relation)}
	for _, o := range opts {
		o(d)
	}
	return d
}

// InTransaction reports whether a BEGIN was decoded without its COMMIT.
func (d *Decoder) InTransaction() bool { return d.inTxn }

// Decode decodes one pgoutput message (the WALData of one XLogData).
// The returned Event owns its memory; data may be reused afterwards.
func (d *Decoder) Decode(data []byte) (Message, error) {
	if len(data) == 0 {
		return Message{}, fmt.Errorf("decode pgoutput: empty message")
	}
	r := &reader{b: data, off: 1}
	var (
		m   Message
		err error
	)
	switch data[0] {
	case 'B':
		m, err = d.begin(r)
	case 'C':
		m, err = d.commit(r)
	case 'R':
		err = d.relation(r)
	case 'I':
		m, err = d.insert(r)
	case 'U', 'D':
		m, err = d.updateOrDelete(data[0], r)
	case 'T':
		m, err = d.truncate(r)
	case 'M':
		m, err = d.message(r)
	case 'O', 'Y':
		// Origin and type descriptions carry nothing the relay publishes;
		// their content is not inspected.
		return Message{Kind: KindSkip}, nil
	default:
		err = fmt.Errorf("unknown message type %q (only protocol version 1 without streaming is supported)", data[0])
	}
	if err != nil {
		return Message{}, fmt.Errorf("decode pgoutput %q message: %w", data[0], err)
	}
	return m, nil
}

func (d *Decoder) begin(r *reader) (Message, error) {
	finalLSN := pglogrepl.LSN(r.u64())
	ts := r.u64()
	_ = r.u32() // xid
	if err := r.done(); err != nil {
		return Message{}, err
	}
	if d.inTxn {
		return Message{}, fmt.Errorf("BEGIN of %s inside the transaction committing at %s", finalLSN, d.commitLSN)
	}
	d.inTxn, d.commitLSN, d.commitTime, d.index = true, finalLSN, pgTime(ts), 0
	return Message{Kind: KindBegin, CommitLSN: finalLSN, CommitTime: d.commitTime}, nil
}

func (d *Decoder) commit(r *reader) (Message, error) {
	_ = r.u8() // flags, unused
	commitLSN := pglogrepl.LSN(r.u64())
	endLSN := pglogrepl.LSN(r.u64())
	ts := r.u64()
	if err := r.done(); err != nil {
		return Message{}, err
	}
	if !d.inTxn {
		return Message{}, fmt.Errorf("COMMIT at %s without BEGIN", commitLSN)
	}
	if commitLSN != d.commitLSN {
		return Message{}, fmt.Errorf("COMMIT at %s but BEGIN announced %s", commitLSN, d.commitLSN)
	}
	if endLSN <= commitLSN {
		return Message{}, fmt.Errorf("COMMIT end %s is not after its start %s", endLSN, commitLSN)
	}
	d.inTxn = false
	return Message{Kind: KindCommit, CommitLSN: commitLSN, EndLSN: endLSN, CommitTime: pgTime(ts)}, nil
}

func (d *Decoder) insert(r *reader) (Message, error) {
	oid := r.u32()
	if tag := r.u8(); r.err == nil && tag != 'N' {
		return Message{}, fmt.Errorf("INSERT tuple tag %q, want 'N'", tag)
	}
	rel, ok := d.relations[oid]
	if r.err == nil && !ok {
		return Message{}, fmt.Errorf("INSERT into relation %d before its Relation message", oid)
	}
	values, err := readTuple(r, rel, d.values)
	d.values = values
	if err != nil {
		return Message{}, err
	}
	if err := r.done(); err != nil {
		return Message{}, err
	}
	if !d.inTxn {
		return Message{}, fmt.Errorf("INSERT into %s outside a transaction", rel.name)
	}
	if !rel.outbox {
		return Message{Kind: KindSkip}, nil
	}
	pos := Position{CommitLSN: d.commitLSN, Index: d.index}
	d.index++
	ev := NewEvent(rel.fields(values), pos)
	ev.CommitTime = d.commitTime
	ev.Table, ev.QualifyID = rel.name, len(d.tables) > 1
	return Message{Kind: KindEvent, Event: ev}, nil
}

func (d *Decoder) updateOrDelete(tag byte, r *reader) (Message, error) {
	oid := r.u32()
	if r.err != nil {
		return Message{}, r.err
	}
	rel, ok := d.relations[oid]
	if !ok {
		return Message{}, fmt.Errorf("change of relation %d before its Relation message", oid)
	}
	if !rel.outbox {
		return Message{Kind: KindSkip}, nil
	}
	op := map[byte]string{'U': "UPDATE", 'D': "DELETE"}[tag]
	return Message{Kind: KindIgnored, Ignored: op + " on " + rel.name}, nil
}

func (d *Decoder) truncate(r *reader) (Message, error) {
	n := r.u32()
	_ = r.u8() // options
	if r.err == nil && uint64(n)*4 != uint64(len(r.b)-r.off) {
		return Message{}, fmt.Errorf("TRUNCATE announces %d relations in %d bytes", n, len(r.b)-r.off)
	}
	for i := uint32(0); i < n && r.err == nil; i++ {
		if rel, ok := d.relations[r.u32()]; ok && rel.outbox {
			return Message{Kind: KindIgnored, Ignored: "TRUNCATE of " + rel.name}, nil
		}
	}
	return Message{Kind: KindSkip}, r.err
}

// pgEpoch is 2000-01-01, the origin of Postgres timestamps.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func pgTime(micros uint64) time.Time {
	return pgEpoch.Add(time.Duration(int64(micros)) * time.Microsecond)
}
