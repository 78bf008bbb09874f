package jetstream

import (
	"context"

	"github.com/outbox-relay/outbox-relay/decode"
)

// Publish queues ev for publishing, waiting while the window is full, and
// returns its sequence number. It is Offer for callers that may block:
// rows read from the table, one-shot republishing. The replication
// goroutine, which must keep answering the server, uses Offer and Room.
func (p *Publisher) Publish(ctx context.Context, ev *decode.Event) (uint64, error) {
	for {
		if seq, ok := p.Offer(ev); ok {
			if p.atomic != nil {
				// Rows read from the table belong to no transaction.
				p.closeTransaction()
			}
			return seq, nil
		}
		select {
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-p.Room():
		}
	}
}
