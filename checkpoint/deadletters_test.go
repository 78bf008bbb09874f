package checkpoint_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// TestDeadLetters lists the dead letters as `dlq list` shows them, each
// with its row's aggregate and event type (none when the row is gone),
// oldest first; keyed by plain id for a relay of one table and by
// qualified id (table/id) for a relay of several, which keeps them in its
// first table's schema. The ids not retried are what `dlq retry --all`
// publishes; MarkRetried takes one off them.
func TestDeadLetters(t *testing.T) {
	cluster, err := relaytest.StartCluster(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := cluster.URL("postgres")
	connCfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	orders := contract.Table{Schema: "public", Name: "outbox_events"}
	shop := contract.Table{Schema: "shop", Name: "order_events"}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA shop`); err != nil {
		t.Fatal(err)
	}
	for _, n := range []migrations.Names{{Table: orders, Publication: "orders_pub"}, {Table: shop, Publication: "shop_pub"}} {
		if _, err := migrations.Apply(ctx, connCfg, n); err != nil {
			t.Fatalf("migrate %s: %v", n.Table, err)
		}
	}
	insert := func(table contract.Table, aggregate string) string {
		t.Helper()
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO `+table.Quoted()+` (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', $1, 'order.created', '{}') RETURNING id::text`, aggregate).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	store := checkpoint.NewStore(pool, orders.Schema, contract.DefaultSlot)
	dead := func(key, reason string) {
		t.Helper()
		if err := store.RecordDeadLetter(ctx, key, reason, 0x10); err != nil {
			t.Fatal(err)
		}
	}
	type shown struct{ id, aggregate, eventType string }
	list := func(tables []contract.Table, all bool) []shown {
		t.Helper()
		l, err := checkpoint.ListDeadLetters(ctx, pool, tables, all)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]shown, len(l))
		for i, d := range l {
			out[i] = shown{d.EventID, "(gone)", "(gone)"}
			if d.AggregateID != nil {
				out[i].aggregate = *d.AggregateType + "/" + *d.AggregateID
			}
			if d.EventType != nil {
				out[i].eventType = *d.EventType
			}
		}
		return out
	}

	if l := list([]contract.Table{orders}, true); len(l) != 0 {
		t.Fatalf("ListDeadLetters of none = %v", l)
	}
	first, second := insert(orders, "a1"), insert(orders, "a2")
	gone := "00000000-0000-0000-0000-000000000000"
	dead(first, "too big")
	dead(gone, "id is NULL")
	dead(second, "too big")
	want := []shown{{first, "order/a1", "order.created"}, {gone, "(gone)", "(gone)"}, {second, "order/a2", "order.created"}}
	if l := list([]contract.Table{orders}, false); !slices.Equal(l, want) {
		t.Errorf("ListDeadLetters of one table =\n%v\nwant\n%v", l, want)
	}
	ids, err := store.DeadLetterIDsNotRetried(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(ids); !slices.Equal(ids, slices.Sorted(slices.Values([]string{first, second, gone}))) {
		t.Errorf("DeadLetterIDsNotRetried = %v; want the three", ids)
	}
	if err := store.MarkRetried(ctx, first); err != nil {
		t.Fatal(err)
	}
	if l := list([]contract.Table{orders}, false); !slices.Equal(l, want[1:]) {
		t.Errorf("ListDeadLetters after MarkRetried =\n%v\nwant\n%v", l, want[1:])
	}
	if l := list([]contract.Table{orders}, true); !slices.Equal(l, want) {
		t.Errorf("ListDeadLetters --all after MarkRetried =\n%v\nwant\n%v", l, want)
	}
	if ids, err := store.DeadLetterIDsNotRetried(ctx); err != nil || slices.Contains(ids, first) || len(ids) != 2 {
		t.Errorf("DeadLetterIDsNotRetried after MarkRetried = %v, %v; want the two others", ids, err)
	}

	// A relay of both tables keys its dead letters by qualified id; the
	// same id in its other table is another event.
	third := insert(shop, "s1")
	if _, err := pool.Exec(ctx, `INSERT INTO `+shop.Quoted()+` (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'order', 's2', 'order.paid', '{}')`, second); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM `+checkpoint.DeadLettersTable); err != nil {
		t.Fatal(err)
	}
	dead(contract.QualifiedID(shop.String(), third), "too big")
	dead(contract.QualifiedID(shop.String(), second), "too big")
	dead(contract.QualifiedID(orders.String(), second), "too big")
	dead(second, "too big") // a plain id: not a key of a relay of several
	want = []shown{
		{contract.QualifiedID(shop.String(), third), "order/s1", "order.created"},
		{contract.QualifiedID(shop.String(), second), "order/s2", "order.paid"},
		{contract.QualifiedID(orders.String(), second), "order/a2", "order.created"},
		{second, "(gone)", "(gone)"},
	}
	if l := list([]contract.Table{orders, shop}, false); !slices.Equal(l, want) {
		t.Errorf("ListDeadLetters of two tables =\n%v\nwant\n%v", l, want)
	}
}
