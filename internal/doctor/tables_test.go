package doctor

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/contract"
)

// TestPGFindingsSeveralTables: doctor judges every table of a relay of
// several: the role must read each, and the findings name them all.
func TestPGFindingsSeveralTables(t *testing.T) {
	o := testOpts
	shop := contract.Table{Schema: "shop", Name: "order_events"}
	o.MoreTables = []contract.Table{shop}
	f := goodPG()
	f.MoreGrants = []tableGrant{{Table: shop, Exists: true, SchemaUsage: true, CanRead: true}}
	fs := find(pgFindings(f, o), "postgres.privileges")
	if len(fs) != 1 || fs[0].Severity != OK || !strings.Contains(fs[0].Message, "public.outbox_events,shop.order_events") {
		t.Fatalf("all granted: %+v", fs)
	}
	f.MoreGrants[0].CanRead, f.MoreGrants[0].SchemaUsage = false, false
	fs = find(pgFindings(f, o), "postgres.privileges")
	if severities(fs)[Error] != 2 || !strings.Contains(fs[0].Fix, `GRANT USAGE ON SCHEMA "shop"`) || !strings.Contains(fs[1].Fix, `GRANT SELECT ON "shop"."order_events"`) {
		t.Fatalf("the second table unreadable: %+v", fs)
	}
	pub := find(pgFindings(goodPG(), o), "postgres.publication")
	if len(pub) != 1 || !strings.Contains(pub[0].Message, "shop.order_events") {
		t.Fatalf("publication finding: %+v", pub)
	}
}
