package relay

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink"
)

// identityRow answers replication.Identify's query: the system id and the
// database, or err.
type identityRow struct {
	system, database string
	err              error
}

func (r identityRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	*dest[0].(*string), *dest[1].(*string) = r.system, r.database
	return nil
}

func (r identityRow) QueryRow(context.Context, string, ...any) pgx.Row { return r }

// TestTableSource: the source names the system, the database, every
// table of the relay and its slot; a server that does not say who it is
// gives the zero source (every relay's messages) and the error.
func TestTableSource(t *testing.T) {
	cfg := Config{Slot: "outbox_relay", Table: contract.Table{Schema: "orders", Name: "outbox"}, MoreTables: []contract.Table{{Schema: "billing", Name: "outbox"}}}
	got, err := TableSource(context.Background(), identityRow{system: "7301234567890123456", database: "app"}, cfg)
	want := sink.Source{System: "7301234567890123456", Database: "app", Table: contract.JoinTables(cfg.Tables()), Slot: "outbox_relay"}
	if err != nil || got != want {
		t.Errorf("TableSource = %+v, %v; want %+v", got, err, want)
	}
	denied := errors.New("permission denied for function pg_control_system")
	if got, err := TableSource(context.Background(), identityRow{err: denied}, cfg); !errors.Is(err, denied) || got != (sink.Source{}) {
		t.Errorf("TableSource without pg_control_system() = %+v, %v; want the zero source and the error", got, err)
	}
}
