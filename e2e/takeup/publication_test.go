package takeup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestGapPublicationChangedBetweenChecks: the table leaves the publication
// and comes back between two of the relay's checks, with an insert in
// between that pgoutput never sends. Membership alone looks fine at every
// check; the publication's identity does not. The relay must stop with a
// gap and never confirm past the change.
func TestGapPublicationChangedBetweenChecks(t *testing.T) {
	env := suite.NewEnv(t)
	r := suite.StartRelay(t, env)
	r.WaitLog("streaming from the slot", 30*time.Second)
	env.Tx(relaytest.NewRow("order", "1", "before", `{}`))
	env.WaitStored(1, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var changedAt pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&changedAt); err != nil {
		t.Fatal(err)
	}
	// One round trip: the three statements run well within the relay's
	// check interval.
	batch := `ALTER PUBLICATION outbox_pub DROP TABLE outbox_events;
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'unseen', '{}');
		ALTER PUBLICATION outbox_pub ADD TABLE outbox_events;`
	if _, err := conn.Exec(ctx, batch); err != nil {
		t.Fatal(err)
	}
	env.Tx(relaytest.NewRow("order", "1", "after", `{}`))
	if code := r.Wait(30 * time.Second); code == 0 {
		t.Fatal("relay kept going after its publication changed")
	}
	for _, want := range []string{"publication", "changed", "--recreate-slot"} {
		if !strings.Contains(r.Logs(), want) {
			t.Errorf("the relay's refusal does not mention %q:\n%s", want, r.Logs())
		}
	}
	if after := env.SlotInfo().ConfirmedFlush; after > changedAt {
		t.Errorf("slot confirmed to %s, past the publication change at %s", after, changedAt)
	}
}
