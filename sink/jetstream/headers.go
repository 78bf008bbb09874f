package jetstream

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/sink"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// maxHeaderBytes is JetStream's limit on the header block of a message.
const maxHeaderBytes = 64 * 1024

// headerSafe reports whether a NATS header carries v exactly: nats.go trims
// surrounding whitespace and replaces line breaks in header values.
func headerSafe(v string) bool {
	if v == "" {
		return true
	}
	if v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// percentEncode escapes '%', space and every byte outside printable ASCII
// as %XX, the form used for header values listed in Outbox-Percent-Encoded.
func percentEncode(v string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c > ' ' && c < 0x7f && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0x0f])
	}
	return b.String()
}

// wireMsg is a reusable outgoing message. Its header map keeps one slice
// per key, so filling it for the next event allocates nothing.
type wireMsg struct {
	msg     nats.Msg
	lsnKey  pglogrepl.LSN
	lsnText string
	// stamp, when set, is the source every message carries; stamped is
	// the value the headers hold now.
	stamp   *sink.Stamp
	stamped *sink.Source
	// several says stamped names several tables: each message then
	// carries its own event's table (sink.Source.OfEvent).
	several bool
	// own are the names of the last event's own headers, removed by reset.
	own []string
	// ce, when set, adds CloudEvents attributes to event messages
	// (cloudevents.go); dead letters keep the relay's own form.
	ce *ceWire
	// traceparent and tracestate, when traceparent is set, are the relay
	// span's context: they replace the row's own trace headers.
	traceparent, tracestate string
	// known holds, for each header the relay sets itself, the slice the
	// map holds (nil when absent); setNow says which of them the message
	// being filled set (wireknown.go).
	known  [numKnown][]string
	setNow uint32
	// size is the size of the header block nats.go writes for the map as
	// it is (headerSize), kept as headers change.
	size int
}

func newWireMsg() *wireMsg {
	w := &wireMsg{size: len("NATS/1.0\r\n\r\n")}
	w.msg.Header = nats.Header{}
	return w
}

// withSource makes every message filled from now on carry the source
// stamp holds (none when stamp is nil).
func (w *wireMsg) withSource(stamp *sink.Stamp) *wireMsg {
	w.stamp = stamp
	return w
}

// stampSource puts the stamp's source in the headers when it changed since
// the last message: it is formatted once per change, not per message.
func (w *wireMsg) stampSource() {
	src := w.stamp.Current()
	if src == w.stamped || src == nil {
		return
	}
	w.stamped, w.several = src, src.Several()
	v := formatSource(*src)
	w.set(contract.HeaderSourceSystem, v.system)
	w.set(contract.HeaderSourceTimeline, v.timeline)
	w.set(contract.HeaderSourceSlot, v.slot)
	for _, o := range v.optional() {
		if o.value == "" {
			w.del(o.key)
		} else {
			w.set(o.key, o.value)
		}
	}
}

// withReplay marks every message filled from now on as published again
// by hand (contract.HeaderReplay), for the reason given.
func (w *wireMsg) withReplay(reason string) *wireMsg {
	if reason != "" {
		w.set(contract.HeaderReplay, reason)
	}
	return w
}

// sourceHeaders are a Source's header values.
type sourceHeaders struct{ system, timeline, slot, origin, database, table string }

// optional are the headers a Source may lack, with their values ("" for
// none).
func (h sourceHeaders) optional() []struct{ key, value string } {
	return []struct{ key, value string }{
		{contract.HeaderSourceOrigin, h.origin},
		{contract.HeaderSourceDatabase, h.database},
		{contract.HeaderSourceTable, h.table},
	}
}

func formatSource(src sink.Source) sourceHeaders {
	h := sourceHeaders{system: src.System, slot: src.Slot, timeline: strconv.FormatUint(uint64(src.Timeline), 10),
		database: encodeName(src.Database), table: encodeName(src.Table)}
	if src.Origin != 0 {
		h.origin = formatLSN(src.Origin)
	}
	return h
}

// encodeName is how a database or table name travels in a header:
// percent-encoded when it holds '%' or anything a header cannot carry
// exactly, so that decodeName gives it back.
func encodeName(v string) string {
	if headerSafe(v) && !strings.Contains(v, "%") {
		return v
	}
	return percentEncode(v)
}

// decodeName reverses encodeName; ok is false for a malformed escape.
func decodeName(v string) (string, bool) {
	if !strings.Contains(v, "%") {
		return v, true
	}
	s, err := url.PathUnescape(v)
	return s, err == nil
}

// SetSourceHeaders puts src in h, as a Publisher stamps its messages (for
// tools and tests that publish outside a Publisher).
func SetSourceHeaders(h nats.Header, src sink.Source) {
	v := formatSource(src)
	h.Set(contract.HeaderSourceSystem, v.system)
	h.Set(contract.HeaderSourceTimeline, v.timeline)
	h.Set(contract.HeaderSourceSlot, v.slot)
	for _, o := range v.optional() {
		if o.value != "" {
			h.Set(o.key, o.value)
		} else {
			h.Del(o.key)
		}
	}
}

// set sets header key to the single value given.
func (w *wireMsg) set(key, value string) {
	if k, ok := knownIndex(key); ok {
		w.setKnown(k, value)
		return
	}
	if vs, ok := w.msg.Header[key]; ok {
		w.size += len(value) - len(vs[0])
		vs[0] = value
		return
	}
	w.msg.Header[key] = []string{value}
	w.size += len(key) + len(value) + len(": \r\n")
}

// del deletes header key.
func (w *wireMsg) del(key string) {
	if k, ok := knownIndex(key); ok {
		w.dropKnown(k)
		return
	}
	for _, v := range w.msg.Header[key] {
		w.size -= len(key) + len(v) + len(": \r\n")
	}
	delete(w.msg.Header, key)
}

// setEncoded sets a row value, percent-encoding it when a header could not
// carry it exactly; encoded names the headers encoded so far.
func (w *wireMsg) setEncoded(key, value string, encoded []string) []string {
	if headerSafe(value) {
		w.set(key, value)
		return encoded
	}
	w.set(key, percentEncode(value))
	return append(encoded, key)
}

// fillEvent prepares the message for ev on subject, with the reply subject
// that routes its PubAck back.
func (w *wireMsg) fillEvent(ev *decode.Event, subject, reply string) {
	w.reset(subject, reply, ev.Payload)
	w.setKnown(hMsgID, ev.MsgID())
	encoded := w.fillCommon(ev, nil)
	if w.ce != nil {
		encoded = w.fillCloudEvent(ev, encoded)
	} else {
		encoded = w.fillOwn(ev.Headers, encoded)
	}
	w.markEncoded(encoded)
	w.sweep()
}

// fillDeadLetter prepares the dead-letter message for ev, stored under id
// (Publisher.deadLetterID). The payload goes along when it fits in maxSize
// together with the headers.
func (w *wireMsg) fillDeadLetter(ev *decode.Event, id, subject, reply, original, reason string, maxSize int) {
	w.reset(subject, reply, nil)
	w.setKnown(hMsgID, contract.DeadLetterMsgID(id))
	w.setKnown(hDeadLetterReason, truncateValue(reason))
	w.setKnown(hOriginalSubject, original)
	encoded := w.setKnownEncoded(hEventID, truncateValue(ev.ID), nil)
	encoded = w.fillCommon(ev, encoded)
	w.markEncoded(w.fillOwn(ev.Headers, encoded))
	w.sweep()
	if size := w.headerBytes() + len(ev.Payload); size <= maxSize {
		w.msg.Data = ev.Payload
	} else {
		w.setKnown(hPayloadOmitted, "payload of "+strconv.Itoa(len(ev.Payload))+" bytes is over the limit")
	}
}

// reset starts the next message: the row's own headers of the last one
// go; the relay's are overwritten in place, and those this message does
// not set are deleted once it is filled (sweep, wireknown.go).
func (w *wireMsg) reset(subject, reply string, data []byte) {
	w.setNow = 0
	for _, k := range w.own {
		w.del(k)
	}
	w.own = w.own[:0]
	w.msg.Subject, w.msg.Reply, w.msg.Data = subject, reply, data
	w.stampSource()
}

// fillCommon sets the relay's headers of ev; encoded names the headers
// percent-encoded so far, and the result those set by now.
func (w *wireMsg) fillCommon(ev *decode.Event, encoded []string) []string {
	encoded = w.setKnownEncoded(hAggregateType, ev.AggregateType, encoded)
	encoded = w.setKnownEncoded(hAggregateID, ev.AggregateID, encoded)
	encoded = w.setKnownEncoded(hEventType, ev.EventType, encoded)
	if ev.CreatedAt != "" {
		w.setKnown(hCreatedAt, ev.CreatedAt)
	}
	if ev.Table != "" {
		w.setKnown(hTable, ev.Table)
	}
	if w.several {
		// A relay of several tables: Outbox-Source-Table names the event's.
		w.set(contract.HeaderSourceTable, encodeName(w.stamped.OfEvent(ev.Table).Table))
	}
	if ev.Position.CommitLSN != w.lsnKey || w.lsnText == "" {
		// Every event of a transaction shares its commit LSN: format it once.
		w.lsnKey, w.lsnText = ev.Position.CommitLSN, formatLSN(ev.Position.CommitLSN)
	}
	w.setKnown(hCommitLSN, w.lsnText)
	w.setKnown(hTxnIndex, strconv.FormatUint(uint64(ev.Position.Index), 10))
	return encoded
}

// fillOwn sets the event's own headers as they are (decode.ParseHeaders
// keeps them out of the Nats- and Outbox- namespaces, so they never
// replace one of the relay's). With a relay span, its context replaces
// the row's trace headers: the relay's span continues the row's trace.
func (w *wireMsg) fillOwn(hs []decode.Header, encoded []string) []string {
	for _, h := range hs {
		if w.traceparent != "" && isTraceHeader(h.Name) {
			continue
		}
		encoded = w.setEncoded(h.Name, h.Value, encoded)
		w.own = append(w.own, h.Name)
	}
	w.setTrace()
	return encoded
}

// markEncoded lists the percent-encoded headers in Outbox-Percent-Encoded.
func (w *wireMsg) markEncoded(encoded []string) {
	if len(encoded) > 0 {
		w.setKnown(hPercentEncoded, strings.Join(encoded, ","))
	}
}

// setTrace puts the relay span's context in the message (see trace.go);
// reset removes it with the event's own headers.
func (w *wireMsg) setTrace() {
	if w.traceparent == "" {
		return
	}
	w.set(headerTraceparent, w.traceparent)
	w.own = append(w.own, headerTraceparent)
	if w.tracestate != "" {
		w.set(headerTracestate, w.tracestate)
		w.own = append(w.own, headerTracestate)
	}
}

// truncateValue keeps dead-letter diagnostics small enough for a header.
func truncateValue(v string) string {
	if len(v) <= contract.MaxDeadLetterValue {
		return v
	}
	return v[:contract.MaxDeadLetterValue] + "…"
}

// headerValue returns a row value of h as the row holds it: decoded when
// Outbox-Percent-Encoded lists it.
func headerValue(h nats.Header, key string) string {
	v := h.Get(key)
	for _, name := range strings.Split(h.Get(contract.HeaderPercentEncoded), ",") {
		if strings.TrimSpace(name) == key {
			return contract.PercentDecode(v)
		}
	}
	return v
}

// formatLSN formats an LSN the way Postgres does ("16/B374D848").
func formatLSN(lsn pglogrepl.LSN) string {
	var buf [40]byte
	b := strconv.AppendUint(buf[:0], uint64(lsn)>>32, 16)
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(lsn)&0xffffffff, 16)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// EventMsg returns the message the relay would publish for ev on subject
// (for tools and benchmarks that publish outside a Publisher).
func EventMsg(ev *decode.Event, subject string) *nats.Msg {
	return FormatEventMsg(ev, subject, Format{})
}

// FormatEventMsg is EventMsg in form f.
func FormatEventMsg(ev *decode.Event, subject string, f Format) *nats.Msg {
	w := newWireMsg().withFormat(f)
	w.fillEvent(ev, subject, "")
	return &w.msg
}

// headerBytes is the size of the header block nats.go writes for the
// message as filled now, kept as headers change (the tests check it
// against a walk of the map, headerSize).
func (w *wireMsg) headerBytes() int { return w.size }
