package jetstream

import (
	"context"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/sink"
)

// Horizon returns where the stream's own limits removed its older
// messages (see sink.Horizon), or nil when the stream has no limits that
// remove messages (a max age, or a size or count limit with discard old)
// or removed none yet.
func (r *Reader) Horizon(ctx context.Context) (*sink.Horizon, error) {
	info, err := r.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read stream info: %w", err)
	}
	cfg, state := info.Config, info.State
	if !RemovesByLimits(cfg) || state.FirstSeq <= max(cfg.FirstSeq, 1) {
		return nil, nil
	}
	h := &sink.Horizon{Limits: Limits(cfg), Before: state.LastTime}
	if state.Msgs > 0 {
		h.Before = state.FirstTime
	}
	err = ForEach(ctx, r.stream, []string{r.events, r.dead}, Read{HeadersOnly: true, brief: true}, func(m *natsjs.RawStreamMsg) bool {
		ev, ok := ParseStored(m)
		if !ok || !sink.OfTable(ev, r.Owner()) {
			return true
		}
		created, err := time.Parse(time.RFC3339Nano, ev.CreatedAt)
		if err != nil {
			return true
		}
		h.Oldest, h.Before = &ev, created
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("read the oldest event of the stream: %w", err)
	}
	return h, nil
}
