package relaytest

import (
	"context"
	"strings"
	"time"
)

// inject runs one step: the fault, its hold time, its heal.
func (n *Nemesis) inject(st Step) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	switch st.Fault {
	case FaultRelayKill, FaultRelayTerm:
		n.stopRelay(n.relays[0], st.Fault == FaultRelayKill)
		time.Sleep(st.Hold)
		n.startRelay(st.N)
	case FaultNATSKill:
		n.nats.Kill()
		time.Sleep(st.Hold)
		if err := n.nats.Restart(ctx); err != nil {
			n.fatalf("restart nats-server: %v", err)
		}
	case FaultNATSStop:
		if err := n.nats.Stop(); err != nil {
			n.finding("nats-server stop: %v", err)
		}
		time.Sleep(st.Hold)
		if err := n.nats.Restart(ctx); err != nil {
			n.fatalf("restart nats-server: %v", err)
		}
	case FaultPGFast, FaultPGImmediate:
		mode := strings.TrimPrefix(string(st.Fault), "pg-")
		took := time.Now()
		if err := n.cfg.Cluster.Stop(ctx, mode); err != nil {
			n.fatalf("pg_ctl stop -m %s: %v", mode, err)
		}
		n.logf("Postgres stopped (%s) in %s", mode, time.Since(took).Round(time.Millisecond))
		time.Sleep(st.Hold)
		if err := n.cfg.Cluster.Start(ctx); err != nil {
			n.fatalf("pg_ctl start: %v", err)
		}
	case FaultPGReset, FaultNATSReset, FaultPGBlackhole, FaultNATSBlackhole:
		p := n.pgProxy
		if strings.HasPrefix(string(st.Fault), "nats-") {
			p = n.natsProxy
		}
		if strings.HasSuffix(string(st.Fault), "-reset") {
			p.Cut()
		} else {
			p.Blackhole()
		}
		time.Sleep(st.Hold)
		p.Restore()
	case FaultSecondInstance:
		n.secondInstance(st)
	case FaultBigTx:
		n.bigTx(ctx, st)
	default:
		n.fatalf("unknown fault %q", st.Fault)
	}
}

// secondInstance starts a relay beside the running one, waits until it
// stands by (or streams), and after the hold time ends one of the two.
func (n *Nemesis) secondInstance(st Step) {
	n.t.Helper()
	older := n.relays[len(n.relays)-1]
	newer := n.startRelay(st.N)
	deadline := time.Now().Add(time.Minute)
	for {
		logs := newer.r.Logs()
		if strings.Contains(logs, "waiting as a standby") || strings.Contains(logs, "streaming from the slot") {
			break
		}
		if newer.r.Exited() || time.Now().After(deadline) {
			n.fatalf("the second relay %d neither stands by nor streams (exited: %v); log tail:\n%s",
				newer.n, newer.r.Exited(), tail(logs, 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(newer.r.Logs(), "streaming from the slot") {
		n.logf("relay %d streams while relay %d runs (it had lost the slot)", newer.n, older.n)
	}
	time.Sleep(st.Hold)
	victim := newer
	if st.EndOlder {
		victim = older
	}
	n.stopRelay(victim, st.EndKill)
}

// bigTx writes st.Rows rows to a table outside the publication in one
// transaction (replacing the previous ones, so the table stays small):
// the walsender decodes it all and sends the relay nothing for it.
func (n *Nemesis) bigTx(ctx context.Context, st Step) {
	n.t.Helper()
	started := time.Now()
	tx, err := n.env.Pool.Begin(ctx)
	if err != nil {
		n.fatalf("big transaction: %v", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `TRUNCATE nemesis_bulk`); err != nil {
		n.fatalf("big transaction: %v", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO nemesis_bulk SELECT g, repeat('x', 200) FROM generate_series(1, $1::int) g`, st.Rows); err != nil {
		n.fatalf("big transaction: %v", err)
	}
	if st.Abort {
		err = tx.Rollback(ctx)
	} else {
		err = tx.Commit(ctx)
	}
	if err != nil {
		n.fatalf("big transaction: end: %v", err)
	}
	n.logf("big transaction of %d rows written in %s", st.Rows, time.Since(started).Round(time.Millisecond))
}
