package jetstream

import (
	"fmt"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// atomicProblem says why the stream whose configuration is cfg cannot take
// atomic batches when spec asks for them (StreamSpec.Atomic): the stream
// lacks allow_atomic, or the server is older than 2.12 and has no atomic
// publishing at all (it drops the setting it does not know). Fatal: the
// relay would publish every transaction as ordinary messages, silently
// breaking what --atomic-transactions promises.
func atomicProblem(nc *nats.Conn, cfg natsjs.StreamConfig, spec StreamSpec) (StreamProblem, bool) {
	if !spec.Atomic || cfg.AllowAtomicPublish {
		return StreamProblem{}, false
	}
	p := StreamProblem{Kind: "atomic", Fatal: true,
		What: fmt.Sprintf("stream %q does not allow atomic publishing (allow_atomic), which --atomic-transactions needs", spec.Name),
		Fix: fmt.Sprintf("set \"allow_atomic\": true in the stream's configuration (nats stream info %s --json, edit, then nats stream edit %s --config FILE), or run without --atomic-transactions",
			spec.Name, spec.Name)}
	if nc != nil && !serverAtLeast(nc.ConnectedServerVersion(), 2, 12) {
		p.What = fmt.Sprintf("NATS server %s has no atomic publishing (2.12 or newer has), which --atomic-transactions needs", nc.ConnectedServerVersion())
		p.Fix = "upgrade the NATS servers to 2.12 or newer, or run without --atomic-transactions"
	}
	return p, true
}
