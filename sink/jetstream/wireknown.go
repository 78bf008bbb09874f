package jetstream

import (
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
)

// The headers the relay sets itself, kept in place from one message to the
// next.
//
// nats.go takes a message's headers only as a map (nats.Header), which
// PublishMsg encodes on every publish; its API has no way to hand it a
// header block encoded once (v1.56: Msg has no raw-header field, and
// Conn.publish, which takes one, is unexported). What the relay can save
// is its own work on the map: the wire message keeps, for each of these
// headers, the one-value slice the map holds, and overwrites the value in
// place, so a message that carries the same headers as the one before
// (nearly every message) costs no map operation for them, no allocation,
// and no walk of the map to learn its size (wireMsg.size is kept as
// values change). A header the previous message carried and this one does
// not is deleted once the message is filled (sweep).
type knownHeader uint8

const (
	hMsgID knownHeader = iota
	hAggregateType
	hAggregateID
	hEventType
	hCreatedAt
	hTable
	hCommitLSN
	hTxnIndex
	hPercentEncoded
	hEventID
	hDeadLetterReason
	hOriginalSubject
	hPayloadOmitted
	hExpectedLastSubjSeq
	numKnown
)

var knownKeys = [numKnown]string{
	hMsgID:               contract.HeaderMsgID,
	hAggregateType:       contract.HeaderAggregateType,
	hAggregateID:         contract.HeaderAggregateID,
	hEventType:           contract.HeaderEventType,
	hCreatedAt:           contract.HeaderCreatedAt,
	hTable:               contract.HeaderTable,
	hCommitLSN:           contract.HeaderCommitLSN,
	hTxnIndex:            contract.HeaderTxnIndex,
	hPercentEncoded:      contract.HeaderPercentEncoded,
	hEventID:             contract.HeaderEventID,
	hDeadLetterReason:    contract.HeaderDeadLetterReason,
	hOriginalSubject:     contract.HeaderOriginalSubject,
	hPayloadOmitted:      contract.HeaderPayloadOmitted,
	hExpectedLastSubjSeq: natsjs.ExpectedLastSubjSeqHeader,
}

// knownIndex returns key's index among the known headers.
func knownIndex(key string) (knownHeader, bool) {
	for i, k := range knownKeys {
		if k == key {
			return knownHeader(i), true
		}
	}
	return 0, false
}

// setKnown sets header k to value for the message being filled.
func (w *wireMsg) setKnown(k knownHeader, value string) {
	w.setNow |= 1 << k
	if vs := w.known[k]; vs != nil {
		w.size += len(value) - len(vs[0])
		vs[0] = value
		return
	}
	vs := []string{value}
	w.known[k] = vs
	w.msg.Header[knownKeys[k]] = vs
	w.size += len(knownKeys[k]) + len(value) + len(": \r\n")
}

// setKnownEncoded is setEncoded for a known header.
func (w *wireMsg) setKnownEncoded(k knownHeader, value string, encoded []string) []string {
	if headerSafe(value) {
		w.setKnown(k, value)
		return encoded
	}
	w.setKnown(k, percentEncode(value))
	return append(encoded, knownKeys[k])
}

// dropKnown deletes header k.
func (w *wireMsg) dropKnown(k knownHeader) {
	vs := w.known[k]
	if vs == nil {
		return
	}
	w.size -= len(knownKeys[k]) + len(vs[0]) + len(": \r\n")
	delete(w.msg.Header, knownKeys[k])
	w.known[k] = nil
}

// sweep deletes the known headers the message being filled did not set
// (since reset): an earlier message's.
func (w *wireMsg) sweep() {
	for k := range numKnown {
		if w.setNow&(1<<k) == 0 && w.known[k] != nil {
			w.dropKnown(k)
		}
	}
}
