package decode

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/contract"
)

// RequiredColumns lists the columns an outbox table must have.
var RequiredColumns = []string{contract.ColumnID, contract.ColumnAggregateType, contract.ColumnAggregateID, contract.ColumnEventType, contract.ColumnPayload}

// oidBytea is the type OID of bytea, the one payload type whose text form
// is not the payload itself.
const oidBytea = 17

type relation struct {
	name   string
	outbox bool
	ncols  int
	// Indexes of the relay's columns in the tuple; createdAt and headers
	// are -1 when absent.
	id, aggregateType, aggregateID, eventType, payload, createdAt, headers int
	payloadIsBytea                                                         bool
}

func (d *Decoder) relation(r *reader) error {
	oid := r.u32()
	schema := string(r.cstring())
	name := string(r.cstring())
	_ = r.u8() // replica identity
	ncols := int(r.u16())
	rel := &relation{name: schema + "." + name, ncols: ncols, createdAt: -1, headers: -1}
	rel.outbox = d.reads(schema, name)
	found := make(map[string]int, len(RequiredColumns)+1)
	for i := 0; i < ncols && r.err == nil; i++ {
		_ = r.u8() // flags
		col := string(r.cstring())
		typ := r.u32()
		_ = r.u32() // type modifier
		if _, dup := found[col]; dup {
			return fmt.Errorf("relation %s lists column %q twice", rel.name, col)
		}
		found[col] = i
		if col == contract.ColumnPayload {
			rel.payloadIsBytea = typ == oidBytea
		}
		if col == contract.ColumnHeaders && !isHeadersType(typ) {
			delete(found, col) // someone else's column: never read
		}
	}
	if err := r.done(); err != nil {
		return err
	}
	if rel.outbox {
		if err := rel.mapColumns(found); err != nil {
			return err
		}
	}
	d.relations[oid] = rel
	return nil
}

// reads reports whether schema.name is one of the Decoder's tables.
func (d *Decoder) reads(schema, name string) bool {
	for _, t := range d.tables {
		if t.Schema == schema && t.Name == name {
			return true
		}
	}
	return false
}

func (rel *relation) mapColumns(found map[string]int) error {
	var missing []string
	for _, c := range RequiredColumns {
		if _, ok := found[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("outbox table %s has no column %s (required: %s)",
			rel.name, strings.Join(missing, ", "), strings.Join(RequiredColumns, ", "))
	}
	rel.id = found[contract.ColumnID]
	rel.aggregateType = found[contract.ColumnAggregateType]
	rel.aggregateID = found[contract.ColumnAggregateID]
	rel.eventType = found[contract.ColumnEventType]
	rel.payload = found[contract.ColumnPayload]
	if i, ok := found[contract.ColumnCreatedAt]; ok {
		rel.createdAt = i
	}
	if i, ok := found[contract.ColumnHeaders]; ok {
		rel.headers = i
	}
	return nil
}

// readTuple reads TupleData into values (reused between calls). Values of
// other tables are bounds-checked but not kept. A value is nil for SQL NULL
// and otherwise a non-nil slice aliasing the message.
func readTuple(r *reader, rel *relation, values [][]byte) ([][]byte, error) {
	n := int(r.u16())
	if r.err != nil {
		return nil, r.err
	}
	if n != rel.ncols {
		return nil, fmt.Errorf("tuple of %s has %d columns, its Relation message %d", rel.name, n, rel.ncols)
	}
	values = values[:0]
	if rel.outbox {
		values = append(values, make([][]byte, n)...)
	}
	for i := 0; i < n && r.err == nil; i++ {
		switch kind := r.u8(); kind {
		case 'n':
			if rel.outbox {
				values[i] = nil
			}
		case 't':
			v := r.take(int(r.u32()))
			if rel.outbox {
				values[i] = v
			}
		case 'u':
			return nil, fmt.Errorf("column %d of an inserted %s row is an unchanged TOAST placeholder, which only an UPDATE may carry", i, rel.name)
		case 'b':
			return nil, fmt.Errorf("column %d of %s is in binary format, which the relay never requests", i, rel.name)
		default:
			if r.err == nil {
				return nil, fmt.Errorf("column %d of %s has unknown kind %q", i, rel.name, kind)
			}
		}
	}
	return values, r.err
}

func (rel *relation) fields(values [][]byte) Fields {
	f := Fields{
		ID:             values[rel.id],
		AggregateType:  values[rel.aggregateType],
		AggregateID:    values[rel.aggregateID],
		EventType:      values[rel.eventType],
		Payload:        values[rel.payload],
		PayloadIsBytea: rel.payloadIsBytea,
		HasCreatedAt:   rel.createdAt >= 0,
	}
	if rel.headers >= 0 {
		f.Headers = values[rel.headers]
	}
	if rel.createdAt >= 0 {
		f.CreatedAt = values[rel.createdAt]
	}
	return f
}

func isHeadersType(oid uint32) bool {
	for _, t := range HeadersColumnTypes {
		if oid == t {
			return true
		}
	}
	return false
}
