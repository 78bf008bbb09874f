package decode_test

import (
	"encoding/binary"
	"fmt"
	"log"
	"os"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// A Decoder turns the WALData of each XLogData message of one replication
// session into events. The messages here were captured from Postgres 15:
// an insert, a transaction with an insert into another table and two
// outbox inserts, an UPDATE, a DELETE and a TRUNCATE (ignored: the outbox
// is insert-only), and one large insert. A rolled-back transaction never
// reaches the decoder.
func ExampleDecoder() {
	msgs, err := readCaptured("testdata/captured/pg15.bin")
	if err != nil {
		log.Fatal(err)
	}
	d := decode.NewDecoder(contract.Table{Schema: "public", Name: "outbox_events"})
	for _, data := range msgs {
		m, err := d.Decode(data)
		if err != nil {
			log.Fatal(err) // never skip a change that cannot be read
		}
		switch m.Kind {
		case decode.KindEvent:
			ev := m.Event
			payload := string(ev.Payload)
			if len(payload) > 40 {
				payload = fmt.Sprintf("(%d bytes)", len(payload))
			}
			fmt.Printf("event %s %s/%s %s at %s\n", ev.EventType, ev.AggregateType, ev.AggregateID, payload, ev.Position)
		case decode.KindIgnored:
			fmt.Println("ignored", m.Ignored)
		case decode.KindCommit:
			fmt.Println("commit", m.EndLSN)
		}
	}
	// Output:
	// event order.created order/42 {"b": [1, 2], "total": 10} at 0/150D860#0
	// commit 0/150D890
	// event order.paid order/43 {} at 0/150DB60#0
	// event order.shipped order/43 {"x": "é"} at 0/150DB60#1
	// commit 0/150DB90
	// ignored UPDATE on public.outbox_events
	// commit 0/150DD68
	// ignored DELETE on public.outbox_events
	// commit 0/150DDE8
	// ignored TRUNCATE of public.outbox_events
	// commit 0/150F790
	// event big big/1 (10009 bytes) at 0/150F928#0
	// commit 0/150F958
}

// readCaptured reads a file of messages, each preceded by its length as 4
// big-endian bytes.
func readCaptured(name string) ([][]byte, error) {
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var msgs [][]byte
	for len(raw) >= 4 {
		n := int(binary.BigEndian.Uint32(raw))
		if n > len(raw)-4 {
			return nil, fmt.Errorf("%s: truncated message", name)
		}
		msgs = append(msgs, raw[4:4+n])
		raw = raw[4+n:]
	}
	return msgs, nil
}
