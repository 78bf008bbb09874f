package relay

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/core"
)

// Republish publishes again the rows with the given keys (`verify
// --republish`: the rows the stream lacks), with their own ids, marked
// contract.ReplayRepublish, and returns how many rows were found. See
// publishKeys; cfg.PGURL names the Postgres the rows come from (NewOneShot).
func Republish(ctx context.Context, deps ReplayDeps, cfg Config, keys []string, log zerolog.Logger) (int, error) {
	_, count, err := publishKeys(ctx, deps, cfg, keys, contract.ReplayRepublish, log, nil)
	return count, err
}

// RetryReport is what RetryDeadLetters did.
type RetryReport struct {
	// Published are the dead letters published again and marked retried,
	// in the order asked.
	Published []string
	// Problems say which were not, and why: a row that still cannot be
	// published, that is gone, or that was dead-lettered again.
	Problems []string
}

// RetryDeadLetters publishes the rows of the dead letters with the given
// keys (core.DeadLetterKey) to their own subjects, marked
// contract.ReplayRetry, and marks them retried (`dlq retry`); rows that
// would be dead letters again are held back and reported. An error means
// publishing or marking failed; the report then says what was done before.
func RetryDeadLetters(ctx context.Context, deps ReplayDeps, cfg Config, keys []string, log zerolog.Logger) (RetryReport, error) {
	var rep RetryReport
	found, rejected := map[string]bool{}, map[string]bool{}
	o, _, err := publishKeys(ctx, deps, cfg, keys, contract.ReplayRetry, log, func(o *OneShot, ev *decode.Event) bool {
		key := core.DeadLetterKey(ev)
		found[key] = true
		if reason := o.Rejects(ev); reason != "" {
			rejected[key] = true
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s still cannot be published: %s", key, reason))
			return false
		}
		return true
	})
	if err != nil {
		return rep, err
	}
	for _, id := range keys {
		switch reason, again := o.DeadLettered(id); {
		case !found[id]:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: no such row in %s (deleted, or an event without a usable id)", id, contract.JoinTables(cfg.Tables())))
		case again:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s was dead-lettered again: %s", id, reason))
		case !rejected[id]:
			if err := deps.Store.MarkRetried(ctx, id); err != nil {
				return rep, err
			}
			rep.Published = append(rep.Published, id)
		}
	}
	return rep, nil
}

// publishKeys publishes the rows with the given keys (ids, qualified by
// their table when the relay reads several: see RowSource.EachKey), in
// commit order, marked with replay (contract.HeaderReplay), and waits for
// their PubAcks. admit, when set, sees every row found, with the
// publisher, and may hold it back. It returns the publisher (to ask what
// was dead-lettered) and how many rows were found.
func publishKeys(ctx context.Context, deps ReplayDeps, cfg Config, keys []string, replay string, log zerolog.Logger, admit func(*OneShot, *decode.Event) bool) (*OneShot, int, error) {
	src, err := NewRowSource(ctx, deps.Pool, cfg.Table, cfg.MoreTables...)
	if err != nil {
		return nil, 0, err
	}
	o, err := NewOneShot(ctx, deps.Stream, cfg, deps.Store, replay, log)
	if err != nil {
		return nil, 0, err
	}
	count, err := src.EachKey(ctx, deps.Pool, "", keys, func(ev *decode.Event) error {
		if admit != nil && !admit(o, ev) {
			return nil
		}
		return o.Publish(ctx, ev)
	})
	if ferr := o.Finish(ctx); err == nil {
		err = ferr
	}
	return o, count, err
}
