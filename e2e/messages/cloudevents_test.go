package messages

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestCloudEventsFormat: with --format cloudevents every event the stream
// holds, from the table at the slot's creation and from the WAL, is a
// valid CloudEvent for the CloudEvents Go SDK (read from the headers and
// body in binary mode, as the NATS binding on the spec's main branch
// defines it), with the row's id, type, aggregate id, created_at and
// payload, and the row's headers as extensions where their names allow;
// hostile values (unicode, quotes, '%', 4 KiB headers, a 3,000-character
// aggregate id) come back exactly. The relay's own headers stay, so the
// stream still matches the table for the check. A row without a type is a
// dead letter in the relay's own form.
func TestCloudEventsFormat(t *testing.T) {
	env := suite.NewEnv(t)
	ctx := context.Background()
	env.Exec(`DROP VIEW outbox_dead_letters`)
	env.Exec(`ALTER TABLE outbox_events ALTER COLUMN aggregate_id TYPE TEXT, ALTER COLUMN event_type TYPE TEXT`)
	write := func(ev outbox.Event) {
		t.Helper()
		tx, err := env.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := outbox.Write(ctx, tx, ev); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	hostile := func(n int) outbox.Event {
		return outbox.Event{AggregateType: "order", AggregateID: fmt.Sprintf(`Zoë 😀 "%d" 100%% a/b`, n), EventType: "com.example.order créé",
			Payload: json.RawMessage(fmt.Sprintf(`{"n": %d, "s": "€ \"q\" \u00e9"}`, n)),
			Headers: map[string]string{
				"traceparent":                 "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"TenantId":                    "tenant ünï 😀 \"x\" %41",
				"longvalue":                   strings.Repeat("é", 2000), // 4,000 bytes, 12,000 encoded
				"X-Request-Id":                "not an extension name",
				"a_much_too_long_header_name": "over 20 characters",
				"ce-id":                       "forged",
			}}
	}
	write(hostile(1)) // published from the table when the slot is created
	relay := suite.StartRelay(t, env, "--format", "cloudevents")
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	write(hostile(2))
	env.Tx(relaytest.NewRow("order", strings.Repeat("long-ä", 500), "order.created", `{}`)) // past outbox.Write's check of the column
	write(outbox.Event{AggregateType: "order", AggregateID: "   ", EventType: "order.blank_subject", Payload: json.RawMessage(`[]`)})
	if _, err := env.Pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', ' ', '{}')`); err != nil {
		t.Fatal(err)
	}
	env.WaitStored(5, 30*time.Second)

	rows := cloudEventRows(t, env)
	source := "/postgres/" + url.PathEscape(env.Database) + "/" + url.PathEscape(env.Table.String())
	var events, dead int
	for _, m := range relaytest.StreamInOrder(t, env) {
		if m.Subject == env.DeadSubj {
			dead++
			if m.Header.Get(contract.HeaderCESpecVersion) != "" || !strings.Contains(m.Header.Get(contract.HeaderDeadLetterReason), "CloudEvent needs a type") {
				t.Errorf("dead letter: %v", m.Header)
			}
			continue
		}
		events++
		ev := parseCloudEvent(t, m)
		row, ok := rows[ev.ID()]
		if !ok {
			t.Errorf("CloudEvent %s: no such row", ev.ID())
			continue
		}
		if ev.SpecVersion() != "1.0" || ev.Type() != row.eventType || ev.Source() != source || !ev.Time().Equal(row.createdAt) ||
			ev.DataContentType() != "application/json" || !bytes.Equal(ev.Data(), []byte(row.payload)) {
			t.Errorf("CloudEvent %s:\n%s\nrow %+v, source %s", ev.ID(), ev, row, source)
		}
		if wantSubject := strings.TrimSpace(row.aggregateID) != ""; (ev.Subject() == row.aggregateID) != wantSubject || (!wantSubject && ev.Subject() != "") {
			t.Errorf("CloudEvent %s: subject %q, aggregate id %q", ev.ID(), ev.Subject(), row.aggregateID)
		}
		checkExtensions(t, ev, row.headers, m)
	}
	if events != 4 || dead != 1 {
		t.Errorf("%d events and %d dead letters, want 4 and 1", events, dead)
	}
	env.Check()
}

// checkExtensions: the row's headers whose names are extension names are
// extensions with their exact values; the others are plain headers, or
// gone when named ce-*.
func checkExtensions(t *testing.T, ev *event.Event, headers map[string]string, m *jetstream.RawStreamMsg) {
	t.Helper()
	exts := ev.Extensions()
	want := 0
	for name, v := range headers {
		lower := strings.ToLower(name)
		switch {
		case strings.HasPrefix(lower, "ce-"):
			if m.Header.Get(name) != "" && m.Header.Get(name) != ev.ID() {
				t.Errorf("CloudEvent %s: the row's %s header replaced an attribute", ev.ID(), name)
			}
		case len(lower) <= 20 && !strings.ContainsAny(lower, "-_"):
			want++
			if exts[lower] != v {
				t.Errorf("CloudEvent %s: extension %s = %q, want %q", ev.ID(), lower, exts[lower], v)
			}
		default:
			if got := m.Header.Get(name); got != v {
				t.Errorf("CloudEvent %s: header %s = %q, want %q", ev.ID(), name, got, v)
			}
		}
	}
	if len(exts) != want {
		t.Errorf("CloudEvent %s: extensions %v", ev.ID(), exts)
	}
}

// cloudEventRow is what a row says its CloudEvent must hold.
type cloudEventRow struct {
	eventType, aggregateID, payload string
	createdAt                       time.Time
	headers                         map[string]string
}

func cloudEventRows(t *testing.T, env *relaytest.Env) map[string]cloudEventRow {
	t.Helper()
	rs, err := env.Pool.Query(context.Background(), `SELECT id::text, event_type, aggregate_id, payload::text, created_at, COALESCE(headers, '{}') FROM outbox_events`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]cloudEventRow{}
	for rs.Next() {
		var id string
		var r cloudEventRow
		if err := rs.Scan(&id, &r.eventType, &r.aggregateID, &r.payload, &r.createdAt, &r.headers); err != nil {
			t.Fatal(err)
		}
		out[id] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// parseCloudEvent reads m with the CloudEvents Go SDK and validates it.
func parseCloudEvent(t *testing.T, m *jetstream.RawStreamMsg) *event.Event {
	t.Helper()
	ev, err := binding.ToEvent(context.Background(), &natsBinary{header: m.Header, body: m.Data})
	if err != nil {
		t.Fatalf("message %d is no CloudEvent: %v (headers %v)", m.Sequence, err, m.Header)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("message %d is no valid CloudEvent: %v\n%s", m.Sequence, err, ev)
	}
	return ev
}

// natsBinary is a NATS message in binary content mode as a binding.Message
// of the SDK: each ce- header an attribute (or an extension), its value
// percent-decoded as the binding requires, the body the data. It is
// written from the binding's text here, not taken from the relay or the
// SDK's NATS module (which decodes no values).
type natsBinary struct {
	header map[string][]string
	body   []byte
}

var ceVersions = spec.WithPrefix("ce-")

func (m *natsBinary) ReadEncoding() binding.Encoding { return binding.EncodingBinary }

func (m *natsBinary) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m *natsBinary) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	version := ceVersions.Version(m.get(ceVersions.PrefixedSpecVersionName()))
	if version == nil {
		return fmt.Errorf("no %s header", ceVersions.PrefixedSpecVersionName())
	}
	for k, vs := range m.header {
		if !strings.HasPrefix(strings.ToLower(k), "ce-") {
			continue
		}
		v, err := url.PathUnescape(vs[0])
		if err != nil || !utf8.ValidString(v) {
			return fmt.Errorf("header %s: %q is not percent-encoded UTF-8 (%v)", k, vs[0], err)
		}
		if attr := version.Attribute(k); attr != nil {
			err = w.SetAttribute(attr, v)
		} else {
			err = w.SetExtension(strings.ToLower(k[len("ce-"):]), v)
		}
		if err != nil {
			return fmt.Errorf("header %s: %w", k, err)
		}
	}
	return w.SetData(bytes.NewReader(m.body))
}

// GetAttribute and GetExtension read one attribute (binding.MessageMetadataReader).
func (m *natsBinary) GetAttribute(k spec.Kind) (spec.Attribute, interface{}) {
	version := ceVersions.Version(m.get(ceVersions.PrefixedSpecVersionName()))
	if version == nil {
		return nil, nil
	}
	attr := version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if v, ok := m.decoded(attr.PrefixedName()); ok {
		return attr, v
	}
	return attr, nil
}

func (m *natsBinary) GetExtension(name string) interface{} {
	if v, ok := m.decoded("ce-" + name); ok {
		return v
	}
	return nil
}

func (m *natsBinary) decoded(name string) (string, bool) {
	raw := m.get(name)
	v, err := url.PathUnescape(raw)
	return v, raw != "" && err == nil
}

func (m *natsBinary) get(name string) string {
	for k, vs := range m.header {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

func (m *natsBinary) Finish(error) error { return nil }
