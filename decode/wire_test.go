package decode

import (
	"encoding/binary"

	"github.com/jackc/pglogrepl"
)

// Encoders for pgoutput protocol version 1 messages, as documented in
// "Logical Replication Message Formats". Tests build streams with them and
// check the decoder against captured server bytes in testdata.

type col struct {
	name string
	typ  uint32
}

func u16(b []byte, v uint16) []byte  { return binary.BigEndian.AppendUint16(b, v) }
func u32(b []byte, v uint32) []byte  { return binary.BigEndian.AppendUint32(b, v) }
func u64(b []byte, v uint64) []byte  { return binary.BigEndian.AppendUint64(b, v) }
func cstr(b []byte, s string) []byte { return append(append(b, s...), 0) }

func msgBegin(final pglogrepl.LSN, xid uint32) []byte {
	b := []byte{'B'}
	b = u64(b, uint64(final))
	b = u64(b, 123456789) // commit timestamp
	return u32(b, xid)
}

func msgCommit(commit, end pglogrepl.LSN) []byte {
	b := []byte{'C', 0}
	b = u64(b, uint64(commit))
	b = u64(b, uint64(end))
	return u64(b, 123456789)
}

func msgRelation(oid uint32, schema, name string, cols []col) []byte {
	b := []byte{'R'}
	b = u32(b, oid)
	b = cstr(b, schema)
	b = cstr(b, name)
	b = append(b, 'd')
	b = u16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, 0)
		b = cstr(b, c.name)
		b = u32(b, c.typ)
		b = u32(b, 0xffffffff)
	}
	return b
}

// msgInsert encodes an insert; a nil value is NULL.
func msgInsert(oid uint32, values ...*string) []byte {
	b := []byte{'I'}
	b = u32(b, oid)
	b = append(b, 'N')
	b = u16(b, uint16(len(values)))
	for _, v := range values {
		if v == nil {
			b = append(b, 'n')
			continue
		}
		b = append(b, 't')
		b = u32(b, uint32(len(*v)))
		b = append(b, *v...)
	}
	return b
}

func str(s string) *string { return &s }

// seedColumns is the seed article's outbox_events table.
var seedColumns = []col{
	{"id", 2950}, {"aggregate_type", 1043}, {"aggregate_id", 1043}, {"event_type", 1043},
	{"payload", 3802}, {"attempts", 23}, {"created_at", 1184}, {"processed_at", 1184},
}

func seedRow(id, aggType, aggID, evType, payload string) []*string {
	return []*string{str(id), str(aggType), str(aggID), str(evType), str(payload), str("0"), str("2026-12-02 11:36:09.123456+00"), nil}
}

// msgMessage encodes a logical decoding message (protocol version 1).
func msgMessage(transactional bool, lsn pglogrepl.LSN, prefix, content string) []byte {
	b := []byte{'M', 0}
	if transactional {
		b[1] = 1
	}
	b = u64(b, uint64(lsn))
	b = cstr(b, prefix)
	b = u32(b, uint32(len(content)))
	return append(b, content...)
}

func envelope(id, evType, payload string) string {
	return `{"id": "` + id + `", "aggregate_type": "order", "aggregate_id": "42", "event_type": "` + evType +
		`", "payload": ` + payload + `, "created_at": "2026-12-03T13:01:02.5+01:00"}`
}
