package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/replication"
)

// limitsAndDrains measures, on one backlog each of one-row and ten-row
// transactions: pg_recvlogical (L1), the relay's receiver without
// publishing (L1), and the relay draining it (R1); and JetStream's limit
// for messages of the same size (L2).
func (b *bench) limitsAndDrains(ctx context.Context) error {
	for _, perTxn := range []int{1, 10} {
		sc, err := b.scenario(ctx, fmt.Sprintf("r1_%drow", perTxn))
		if err != nil {
			return err
		}
		end, err := b.backlog(ctx, sc, b.cfg.Events, perTxn, "recv_"+sc.name, "bare_"+sc.name)
		if err != nil {
			return err
		}
		label := fmt.Sprintf("%d-row transactions", perTxn)
		if perTxn == 1 {
			size := sc.payloadSize(ctx, b.pool)
			b.progress("L2: JetStream storing %d messages of ~%d bytes with Nats-Msg-Id, async window 1024", b.cfg.Events, size)
			took, err := jetStreamLimit(ctx, b.natsURL, b.cfg.Events, size)
			if err != nil {
				return err
			}
			b.report.add("l2", "L2", "JetStream publish limit (async, window 1024)", b.cfg.Events, took)
			// CPU per event settles within tens of thousands of messages;
			// eight passes of a default run's backlog would add a minute.
			n := min(b.cfg.Events, maxShapeEvents)
			b.progress("L2S: what the message shape costs: JetStream storing %d messages of ~%d bytes in each of %d header sets, twice", n, size, len(msgShapes()))
			if err := b.shapes(ctx, n, size); err != nil {
				return err
			}
		}
		b.progress("L1: pg_recvlogical over %d events in %s", b.cfg.Events, label)
		key := fmt.Sprintf("%drow", perTxn)
		recv, err := b.readerLimit(ctx, "l1.recv."+key, "pg_recvlogical, "+label, "recv_"+sc.name, func() (time.Duration, error) {
			took, _, err := pgRecvlogical(ctx, b.pgBinDir, b.pgURL, "recv_"+sc.name, sc.publication, end)
			return took, err
		})
		if err != nil {
			return err
		}
		b.progress("L1: the relay's receiver and decoder, publishing off, over %s", label)
		if _, err := b.readerLimit(ctx, "l1.receiver."+key, "relay receiver, no publishing, "+label, "bare_"+sc.name, func() (time.Duration, error) {
			return bareReceiver(ctx, b.pool, b.repl, "bare_"+sc.name, sc.publication, sc.table, b.cfg.Events)
		}); err != nil {
			return err
		}
		b.progress("R1: the relay draining %d events in %s", b.cfg.Events, label)
		r, err := b.drain(ctx, sc, b.cfg.Events, end)
		if err != nil {
			return err
		}
		b.report.addDrain("r1."+key, "R1", "relay drain, "+label, r, recv)
	}
	return nil
}

// readerLimit runs one L1 reader over the backlog on slot, measuring the
// walsender that serves it, then drops the slot.
func (b *bench) readerLimit(ctx context.Context, key, what, slot string, read func() (time.Duration, error)) (*benchRow, error) {
	defer func() { _ = replication.DropSlot(context.WithoutCancel(ctx), b.pool, slot) }()
	watch := watchWalsender(ctx, b.pool, slot)
	took, err := read()
	walsnd, walsndKnown := watch()
	if err != nil {
		return nil, err
	}
	row := b.report.add(key, "L1", what, b.cfg.Events, took)
	row.walsnd, row.walsndKnown = walsnd, walsndKnown
	return row, nil
}

// scenario returns a prepared scenario: its table, publication and
// procedures exist.
func (b *bench) scenario(ctx context.Context, name string) (scenario, error) {
	sc, err := newScenario(name)
	if err != nil {
		return sc, err
	}
	return sc, sc.prepare(ctx, b.pool)
}

// backlog writes n events into a prepared scenario whose relay slot (and
// extra reader slots) exist, while no relay runs. It returns the WAL
// position after them.
func (b *bench) backlog(ctx context.Context, sc scenario, n, perTxn int, readers ...string) (pglogrepl.LSN, error) {
	return b.backlogWith(ctx, sc, n, perTxn, func() (pglogrepl.LSN, error) { return sc.fill(ctx, b.pool, n, perTxn) }, readers...)
}

// backlogWith is backlog with the rows that fill writes.
func (b *bench) backlogWith(ctx context.Context, sc scenario, n, perTxn int, fill func() (pglogrepl.LSN, error), readers ...string) (pglogrepl.LSN, error) {
	// One short run creates the relay's slot, as a first start would.
	relay, err := startChild(b.cfg.Self, b.relayArgs(sc), b.dir+"/relay-"+sc.name+"-init.log")
	if err != nil {
		return 0, err
	}
	if err := waitLogLine(ctx, b.dir+"/relay-"+sc.name+"-init.log", "streaming from the slot"); err != nil {
		relay.stop()
		return 0, err
	}
	if err := relay.stop(); err != nil {
		log, _ := os.ReadFile(b.dir + "/relay-" + sc.name + "-init.log")
		return 0, fmt.Errorf("first relay run: %w\n%s", err, log)
	}
	for _, slot := range readers {
		if err := createSlot(ctx, b.pool, slot); err != nil {
			return 0, err
		}
	}
	b.progress("writing %d events in %d-row transactions (the relay is stopped)", n, perTxn)
	started := time.Now()
	end, err := fill()
	if err != nil {
		return 0, err
	}
	b.progress("  written in %s", time.Since(started).Round(10*time.Millisecond))
	sc.quiesce(ctx, b.pool, b.progress)
	return end, nil
}

// latencies runs the fixed-rate latency measurements (R2).
func (b *bench) latencies(ctx context.Context) error {
	if len(b.rates) == 0 {
		return nil
	}
	sc, err := b.scenario(ctx, "r2")
	if err != nil {
		return err
	}
	for _, rate := range b.rates {
		b.progress("R2: commit-to-stream latency at %.0f events/s for %s", rate, b.cfg.Duration)
		r, err := b.latency(ctx, sc, rate, b.cfg.Duration)
		if err != nil {
			return err
		}
		b.report.latencies = append(b.report.latencies, r)
	}
	return nil
}

// resources measures CPU and memory on large drains (R3).
func (b *bench) resources(ctx context.Context) error {
	if b.cfg.Big == 0 {
		return nil
	}
	for _, run := range []struct {
		name, key string
		perTxn    int
		label     string
	}{{"r3_backlog", "r3.backlog", 1, "backlog of one-row transactions"}, {"r3_bigtxn", "r3.one_txn", b.cfg.Big, "one transaction"}} {
		sc, err := b.scenario(ctx, run.name)
		if err != nil {
			return err
		}
		end, err := b.backlog(ctx, sc, b.cfg.Big, run.perTxn)
		if err != nil {
			return err
		}
		b.progress("R3: the relay draining %d events, %s", b.cfg.Big, run.label)
		r, err := b.drain(ctx, sc, b.cfg.Big, end)
		if err != nil {
			return err
		}
		b.report.addDrain(run.key, "R3", fmt.Sprintf("relay drain, %d events, %s", b.cfg.Big, run.label), r, nil)
	}
	return nil
}

// baseline runs the seed article's polling relay (R4).
func (b *bench) baseline(ctx context.Context) error {
	if b.cfg.Baseline == 0 {
		return nil
	}
	sc, err := b.scenario(ctx, "r4")
	if err != nil {
		return err
	}
	if _, err := sc.fill(ctx, b.pool, b.cfg.Baseline, 1); err != nil {
		return err
	}
	b.progress("R4: the seed article's polling relay, one batch of 100 per one-second tick, for 5s")
	r, err := b.polling(ctx, sc, false, 5*time.Second)
	if err != nil {
		return err
	}
	b.report.polls = append(b.report.polls, r)
	b.progress("R4: the same relay looping until the table is empty on each tick")
	if r, err = b.polling(ctx, sc, true, 10*time.Minute); err != nil {
		return err
	}
	b.report.polls = append(b.report.polls, r)
	b.progress("R4: outbox-relay --source poll on the same rows")
	if r, err = b.pollRelay(ctx, sc); err != nil {
		return err
	}
	b.report.polls = append(b.report.polls, r)
	return nil
}
