package relaytest

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/contract"
)

// KillBeforeConfirm starts a relay (status updates every 30 s), writes a
// batch of ten transactions, waits until the stream holds it and SIGKILLs
// the relay, until a kill lands between the batch's PubAcks and the
// slot's confirmation of its last transaction: what a restart must skip.
// stored, when set, runs once the batch is stored and before the kill,
// with the attempt number. It returns the instant of that kill.
func (s *Suite) KillBeforeConfirm(t testing.TB, env *Env, stored func(attempt int)) time.Time {
	t.Helper()
	for attempt := 0; ; attempt++ {
		relay := s.StartRelay(t, env, "--status-interval", "30s")
		relay.WaitLog(LogStreaming, FaultWait)
		var last []string
		for i := 0; i < 10; i++ {
			last = env.Tx(NewRow("order", "b", "batch", `{}`), NewRow("order", "c", "batch", `{}`))
		}
		// The batch is stored once its last transaction is (a count of
		// messages would also count other publishers' copies).
		WaitFor(t, 30*time.Second, "the batch stored", func() bool {
			held := StoredByID(t, env)
			for _, id := range last {
				if held[id] == nil {
					return false
				}
			}
			return true
		})
		if stored != nil {
			stored(attempt)
		}
		relay.Kill()
		killed := time.Now()
		lsn, _ := pglogrepl.ParseLSN(StoredByID(t, env)[last[0]].Header.Get(contract.HeaderCommitLSN))
		if env.SlotInfo().ConfirmedFlush <= lsn {
			return killed
		}
		if attempt == 5 {
			t.Fatal("could not kill the relay between PubAck and status update in 6 attempts")
		}
	}
}
