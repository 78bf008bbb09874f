package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// TestFormatFlags: the default form is the relay's own; cloudevents takes
// its default ce-source from --pg-url's database and the table; a
// --ce-source without cloudevents, or one that is no URI reference, is
// refused.
func TestFormatFlags(t *testing.T) {
	table := contract.DefaultTable
	for _, c := range []struct {
		flags formatFlags
		pgURL string
		want  jetstream.Format
		err   string
	}{
		{formatFlags{Format: formatOutbox}, "", jetstream.Format{}, ""},
		{formatFlags{Format: formatCloudEvents}, "postgres://relay@db:5432/my%20app", jetstream.Format{CloudEvents: true, CESource: "/postgres/my%20app/public.outbox_events"}, ""},
		{formatFlags{Format: formatCloudEvents, CESource: "urn:shop:orders"}, "", jetstream.Format{CloudEvents: true, CESource: "urn:shop:orders"}, ""},
		{formatFlags{Format: formatOutbox, CESource: "/x"}, "", jetstream.Format{}, "applies to --format cloudevents only"},
		{formatFlags{Format: formatCloudEvents, CESource: "%zz"}, "", jetstream.Format{}, "not a URI reference"},
		{formatFlags{Format: formatCloudEvents}, "", jetstream.Format{}, "no Postgres connection string"},
	} {
		got, err := c.flags.parse(c.pgURL, table)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: err %v, want %q", c.flags, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: %+v, %v; want %+v", c.flags, got, err, c.want)
		}
	}
}

func TestFormatFlagsSeveralTables(t *testing.T) {
	a, b := contract.Table{Schema: "orders", Name: "outbox"}, contract.Table{Schema: "billing", Name: "outbox"}
	got, err := formatFlags{Format: formatCloudEvents}.parse("postgres://u@h/app", a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"orders.outbox": "/postgres/app/orders.outbox", "billing.outbox": "/postgres/app/billing.outbox"}
	if !reflect.DeepEqual(got.TableSources, want) || got.CESource != want["orders.outbox"] {
		t.Errorf("ce-sources of a relay of two tables: %q and %v, want %v", got.CESource, got.TableSources, want)
	}
	if got, _ := (formatFlags{Format: formatCloudEvents, CESource: "/mine"}).parse("postgres://u@h/app", a, b); got.TableSources != nil {
		t.Errorf("an explicit --ce-source names every event's source, got per-table %v", got.TableSources)
	}
}
