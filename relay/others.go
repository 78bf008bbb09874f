package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// One table, one relay. What the stream holds is decided by the events'
// identity, so any take-up (a new or renamed slot, a second deployment)
// publishes only what the stream lacks; but two relays streaming one table
// at once would each publish every new event, and JetStream drops the
// second copy only within its duplicate window. The relay records with its
// slot the table it serves (outbox_relay_slots.outbox_table) and refuses
// to stream while another slot recorded for the same table is active: at
// its take-up, before it creates or publishes anything, and again at the
// start of every replication session, once it holds its own slot (so of
// two relays starting together, the second to look sees the first).
//
// A relay of several tables records all of them, sorted and
// comma-separated (checkpoint.SlotTables), and checks every one: a second
// relay on any table of it is refused, and it is refused while another
// slot serves any of its tables. The records table is the one in the
// relay's first table's schema (where a relay of several keeps its record,
// marks and dead letters): two relays whose first tables lie in different
// schemas do not see each other's records, so tables of one relay in
// several schemas are best listed with the same first table everywhere.

// secondRelay returns a FatalError when another slot recorded for one of
// the relay's tables is active: another relay streams it. Idle slots of
// the tables are logged when warnIdle: they keep WAL for nobody.
func secondRelay(ctx context.Context, store *checkpoint.Store, slots *pgxpool.Pool, cfg Config, warnIdle bool, log zerolog.Logger) error {
	others, err := store.OtherSlots(ctx, slots)
	if err != nil {
		return err
	}
	for _, o := range others {
		table, ok := o.ServesAny(cfg.Tables())
		if !ok {
			continue
		}
		if o.Active {
			return secondRelayError(cfg, table, o)
		}
		if o.Idle() && warnIdle {
			log.Warn().Str("slot", o.Slot).Str("table", o.Table).Int64("retained_bytes", o.RetainedBytes).Str("drop", o.DropSQL(cfg.Table.Schema)).
				Msg("another slot recorded for this table exists and no relay streams from it: it keeps WAL; if no relay will use it again, drop it")
		}
	}
	return nil
}

func secondRelayError(cfg Config, table contract.Table, o checkpoint.OtherSlot) error {
	return &contract.FatalError{
		Err: fmt.Errorf("another relay streams table %s: slot %q, recorded for it in %s.%s, is active (pid %d); a relay on slot %q as well would publish every event a second time",
			table, o.Slot, cfg.Table.Schema, checkpoint.RecordsTable, o.ActivePID, cfg.Slot),
		Hint: fmt.Sprintf("run one relay per table: stop this one, or start it with --slot %s (it then waits as that relay's standby); "+
			"to move the table to slot %q, stop the relay of slot %q first (this one then publishes only what the stream lacks), and drop the old slot: %s",
			o.Slot, cfg.Slot, o.Slot, o.DropSQL(cfg.Table.Schema)),
	}
}

// idleSlotsEvery is how often the other slots are read for the gauge.
const idleSlotsEvery = 30 * time.Second

// idleSlotsGauge keeps outbox_relay_idle_slot_retained_bytes up to date:
// for every other slot recorded in the relay's records table that exists
// and that nothing streams from, the WAL the server keeps for it. A slot
// left behind by a renamed --slot, a second deployment or a relay of
// another table that stopped keeps WAL until it is dropped.
type idleSlotsGauge struct {
	store *checkpoint.Store
	slots *pgxpool.Pool
	gauge *prometheus.GaugeVec
	log   zerolog.Logger
}

func newIdleSlotsGauge(reg prometheus.Registerer, store *checkpoint.Store, slots *pgxpool.Pool, log zerolog.Logger) (*idleSlotsGauge, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_relay_idle_slot_retained_bytes",
		Help: "WAL bytes the server keeps for another slot recorded in outbox_relay_slots that no relay streams from (`outbox-relay doctor` gives the SQL that drops it), read every " + idleSlotsEvery.String() + ".",
	}, []string{"slot", "table"})
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return &idleSlotsGauge{store: store, slots: slots, gauge: g, log: log}, nil
}

// Run samples the slots until ctx ends.
func (g *idleSlotsGauge) Run(ctx context.Context) error {
	tick := time.NewTicker(idleSlotsEvery)
	defer tick.Stop()
	logs := retry.NewLogLimiter()
	for {
		if err := g.Sample(ctx); err != nil && ctx.Err() == nil && logs.Allow() {
			g.log.Warn().Err(err).Msg("cannot read the other recorded slots for metrics")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Sample reads the slots once; slots that are gone or active again leave
// the gauge.
func (g *idleSlotsGauge) Sample(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	others, err := g.store.OtherSlots(qctx, g.slots)
	if err != nil {
		return err
	}
	g.gauge.Reset()
	for _, o := range others {
		if o.Idle() {
			g.gauge.WithLabelValues(o.Slot, o.Table).Set(float64(o.RetainedBytes))
		}
	}
	return nil
}
