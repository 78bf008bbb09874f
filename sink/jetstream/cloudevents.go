package jetstream

import (
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// Format is the form of the event messages a Publisher writes. The zero
// Format is the relay's own: the headers of docs/setup.md, byte for byte
// what earlier versions wrote.
type Format struct {
	// CloudEvents adds, to the relay's own headers, the CloudEvents
	// attributes in binary content mode (contract.CEPrefix), and turns the
	// event's own headers into extension attributes where they can be
	// (docs/writing-and-consuming.md). Every header the relay itself reads
	// back (Nats-Msg-Id, Outbox-*) stays, so resuming, verify and status
	// work alike on both forms. Dead letters keep the relay's own form.
	CloudEvents bool
	// CESource is every event's ce-source: a URI reference naming where
	// the events come from (DefaultCESource). Required with CloudEvents.
	CESource string
	// TableSources, for a relay of several tables, is the ce-source of
	// each table's events (by schema.table, as decode.Event.Table names
	// it): the events of two tables come from two places. An event whose
	// table is not listed gets CESource.
	TableSources map[string]string
}

// DefaultCESource is the ce-source of the events of table (schema.table)
// in database: /postgres/<database>/<schema.table>, each name
// percent-escaped as a URI path segment.
func DefaultCESource(database, table string) string {
	return "/postgres/" + url.PathEscape(database) + "/" + url.PathEscape(table)
}

// DefaultCloudEvents is the CloudEvents form with the default ce-source
// (DefaultCESource) of the events of table in database; for a relay of
// several tables (more), TableSources names each table's own, so that
// every event names the table it comes from.
func DefaultCloudEvents(database string, table contract.Table, more ...contract.Table) Format {
	f := Format{CloudEvents: true, CESource: DefaultCESource(database, table.String())}
	for _, t := range more {
		if f.TableSources == nil {
			f.TableSources = map[string]string{table.String(): f.CESource}
		}
		f.TableSources[t.String()] = DefaultCESource(database, t.String())
	}
	return f
}

// Validate says why f cannot be used.
func (f Format) Validate() error {
	if !f.CloudEvents {
		return nil
	}
	if strings.TrimSpace(f.CESource) == "" {
		return errors.New("a CloudEvents source (ce-source) is required")
	}
	if _, err := url.Parse(f.CESource); err != nil {
		return fmt.Errorf("ce-source %q is not a URI reference: %w", f.CESource, err)
	}
	return nil
}

// ceWire is what a wire message adds to each event in the CloudEvents
// form.
type ceWire struct {
	source  string            // ce-source, encoded for its header once
	byTable map[string]string // each table's, encoded (Format.TableSources)
}

// sourceOf is the encoded ce-source of ev.
func (c *ceWire) sourceOf(ev *decode.Event) string {
	if s, ok := c.byTable[ev.Table]; ok {
		return s
	}
	return c.source
}

// withFormat makes every event message filled from now on take form f.
func (w *wireMsg) withFormat(f Format) *wireMsg {
	if f.CloudEvents {
		w.ce = &ceWire{source: contract.CEEncode(f.CESource)}
		for table, src := range f.TableSources {
			if w.ce.byTable == nil {
				w.ce.byTable = map[string]string{}
			}
			w.ce.byTable[table] = contract.CEEncode(src)
		}
	}
	return w
}

// Media types of the data, when the event's headers do not name one.
const (
	ceJSON  = "application/json"
	ceBytes = "application/octet-stream"
)

// fillCloudEvent adds ev's CloudEvents attributes, and its own headers as
// extensions where the binding allows. Every value is percent-encoded as
// the binding requires (contract.CEEncode), so none of them is listed in
// Outbox-Percent-Encoded; encoded is that list for the other headers.
func (w *wireMsg) fillCloudEvent(ev *decode.Event, encoded []string) []string {
	w.setCE(contract.HeaderCESpecVersion, contract.CESpecVersion)
	// The id JetStream dedups by: unique per source even when a relay of
	// several tables is given one --ce-source for all of them.
	w.setCE(contract.HeaderCEID, contract.CEEncode(ev.MsgID()))
	w.setCE(contract.HeaderCESource, w.ce.sourceOf(ev))
	w.setCE(contract.HeaderCEType, contract.CEEncode(ev.EventType))
	w.setCE(contract.HeaderCEDataContentType, contract.CEEncode(dataContentType(ev)))
	// The SDKs refuse a blank subject; the aggregate id stays in
	// Outbox-Aggregate-Id whatever it is.
	if strings.TrimSpace(ev.AggregateID) != "" {
		w.setCE(contract.HeaderCESubject, contract.CEEncode(ev.AggregateID))
	}
	if ev.CreatedAt != "" {
		w.setCE(contract.HeaderCETime, ev.CreatedAt)
	}
	for _, h := range ev.Headers {
		if w.traceparent != "" && isTraceHeader(h.Name) {
			continue // the relay's span continues the row's trace (setCETrace)
		}
		switch ceHeaderKind(h.Name) {
		case ceExtension:
			attr, _ := contract.CEExtension(h.Name)
			w.setCE(contract.CEPrefix+attr, contract.CEEncode(h.Value))
		case cePlain:
			encoded = w.setEncoded(h.Name, h.Value, encoded)
			w.own = append(w.own, h.Name)
		}
	}
	w.setCETrace()
	return encoded
}

// setCETrace puts the relay span's context in the CloudEvents form: the
// distributed tracing extension (ce-traceparent, ce-tracestate), where the
// row's own traceparent goes in this form too.
func (w *wireMsg) setCETrace() {
	if w.traceparent == "" {
		return
	}
	w.setCE(contract.CEPrefix+headerTraceparent, contract.CEEncode(w.traceparent))
	if w.tracestate != "" {
		w.setCE(contract.CEPrefix+headerTracestate, contract.CEEncode(w.tracestate))
	}
}

// setCE sets a CloudEvents header; reset removes it, so that a dead
// letter filled next keeps the relay's own form.
func (w *wireMsg) setCE(key, value string) {
	w.set(key, value)
	w.own = append(w.own, key)
}

// What an event's own header becomes in the CloudEvents form.
type ceKind int

const (
	// ceExtension: an extension attribute, ce-<name in lower case>
	// (contract.CEExtension).
	ceExtension ceKind = iota
	// cePlain: a NATS header as in the relay's own form, which no
	// CloudEvents reader takes for an attribute: names an extension may
	// not have (a '-' or '_', over 20 characters) and those of context
	// attributes (id, type, ...), which the event's own header must not
	// replace.
	cePlain
	// ceDropped: a name starting with ce-, which readers would take for an
	// attribute (usually an invalid one), and Content-Type, which the
	// binding reads as the mark of structured mode; Content-Type names
	// the data's media type instead (dataContentType).
	ceDropped
)

func ceHeaderKind(name string) ceKind {
	if _, ok := contract.CEExtension(name); ok {
		return ceExtension
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, contract.CEPrefix) || lower == "content-type" {
		return ceDropped
	}
	return cePlain
}

// dataContentType is the media type of ev's payload: the event's own
// Content-Type header when it holds a valid one, else JSON, or bytes for
// a bytea payload.
func dataContentType(ev *decode.Event) string {
	for _, h := range ev.Headers {
		if strings.EqualFold(h.Name, "content-type") {
			if _, _, err := mime.ParseMediaType(h.Value); err == nil {
				return h.Value
			}
		}
	}
	if ev.Binary {
		return ceBytes
	}
	return ceJSON
}

// ceProblem says why ev cannot be a valid CloudEvent (it then goes to the
// dead-letter subject), "" when it can: the spec requires a non-empty
// type.
func ceProblem(ev *decode.Event) string {
	if strings.TrimSpace(ev.EventType) == "" {
		return "event_type is empty or blank: a CloudEvent needs a type (--format cloudevents)"
	}
	return ""
}
