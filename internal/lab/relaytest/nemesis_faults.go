package relaytest

import (
	"context"
	"strings"
	"time"
)

// inject runs one step: the fault, its hold time, its heal. Each fault
// calls fire at the moment it strikes.
func (n *Nemesis) inject(st Step) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	switch st.Fault {
	case FaultRelayKill, FaultRelayTerm:
		n.stopRelay(n.relays[0], st.Fault == FaultRelayKill)
		time.Sleep(st.Hold)
		n.startRelay(st.N)
	case FaultNATSKill, FaultNATSStop:
		n.natsDown(ctx, st.Fault == FaultNATSKill)
		time.Sleep(st.Hold)
		n.natsUp()
	case FaultLeaderKill:
		n.killLeader(ctx, st)
	case FaultPGFast, FaultPGImmediate:
		mode := strings.TrimPrefix(string(st.Fault), "pg-")
		took := time.Now()
		n.fire()
		if err := n.cfg.Cluster.Stop(ctx, mode); err != nil {
			n.fatalf("pg_ctl stop -m %s: %v", mode, err)
		}
		n.logf("Postgres stopped (%s) in %s", mode, time.Since(took).Round(time.Millisecond))
		time.Sleep(st.Hold)
		if err := n.cfg.Cluster.Start(ctx); err != nil {
			n.fatalf("pg_ctl start: %v", err)
		}
	case FaultPGReset, FaultNATSReset, FaultPGBlackhole, FaultNATSBlackhole:
		n.proxyFault(st)
	case FaultSecondInstance:
		n.secondInstance(st)
	case FaultBigTx:
		n.fire()
		n.bigTx(ctx, st)
	default:
		n.fatalf("unknown fault %q", st.Fault)
	}
}

// proxyFault cuts or blackholes the relay's connections to Postgres or to
// every NATS node for the hold time.
func (n *Nemesis) proxyFault(st Step) {
	ps := []*Proxy{n.pgProxy}
	if strings.HasPrefix(string(st.Fault), "nats-") {
		ps = n.natsProxies
	}
	n.fire()
	for _, p := range ps {
		if strings.HasSuffix(string(st.Fault), "-reset") {
			p.Cut()
		} else {
			p.Blackhole()
		}
	}
	time.Sleep(st.Hold)
	for _, p := range ps {
		p.Restore()
	}
}

// secondInstance starts a relay beside the running one, waits until it
// stands by (or streams), and after the hold time ends one of the two.
func (n *Nemesis) secondInstance(st Step) {
	n.t.Helper()
	older := n.relays[len(n.relays)-1]
	n.fire()
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
		// The streaming relay's end is the fault here: stopRelay waits
		// for its publishes in flight and records them in a new hit.
		victim = older
		n.hit = &faultHit{lag: -1}
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
