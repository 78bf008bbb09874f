package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"
)

// Read says what ForEach reads.
type Read struct {
	// From is the first sequence; zero means the beginning, or Since.
	From uint64
	// Since starts at the first message stored at or after it.
	Since time.Time
	// HeadersOnly leaves the payloads on the server.
	HeadersOnly bool
}

// ForEach calls fn for every message on subjects stored from the starting
// point up to the stream's last sequence at the time of the call, in
// stream order, until fn returns false.
func ForEach(ctx context.Context, stream jetstream.Stream, subjects []string, read Read, fn func(*jetstream.RawStreamMsg) bool) error {
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("read stream info: %w", err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 || read.From > last {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, HeadersOnly: read.HeadersOnly}
	switch {
	case read.From > 1:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, read.From
	case !read.Since.IsZero():
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &read.Since
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("read stream %q: %w", info.Config.Name, err)
	}
	for {
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			return fmt.Errorf("read stream %q: %w", info.Config.Name, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			seq := meta.Sequence.Stream
			if seq > last {
				return nil
			}
			if !fn(&jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: seq, Header: m.Headers(), Data: m.Data(), Time: meta.Timestamp}) || seq == last {
				return nil
			}
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("read stream %q: %w", info.Config.Name, err)
		}
		if n == 0 {
			ci, err := cons.Info(ctx)
			if err != nil {
				return fmt.Errorf("read stream %q: %w", info.Config.Name, err)
			}
			if ci.NumPending == 0 {
				return nil // the rest is on other subjects
			}
		}
	}
}

// ReadTail calls fn, in stream order, for every relay message on subjects
// whose commit LSN is at or after from: the events a slot confirmed at
// from will replay and that the stream already holds. It finds where that
// tail starts with a few lookups on searchSubject (exponential, then
// binary search from the end), so its cost follows the tail's length, not
// the stream's.
func ReadTail(ctx context.Context, stream jetstream.Stream, subjects []string, searchSubject string, from pglogrepl.LSN, fn func(StoredEvent)) error {
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("read stream info: %w", err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	start, err := tailStart(ctx, stream, searchSubject, from, info.State.FirstSeq, info.State.LastSeq)
	if err != nil {
		return err
	}
	return ForEach(ctx, stream, subjects, Read{From: start, HeadersOnly: true}, func(m *jetstream.RawStreamMsg) bool {
		if ev, ok := ParseStored(m); ok && ev.Position.CommitLSN >= from {
			fn(ev)
		}
		return true
	})
}

// tailStart returns a sequence from which on every relay message on
// subject has a commit LSN at or after from, with no such message before
// it (last+1 when there is none). Messages of the relay are stored in
// commit order, so "before from" holds for a prefix of the stream. Should
// an out-of-order message mislead the search, the tail only starts late:
// events are then published again, never skipped.
func tailStart(ctx context.Context, stream jetstream.Stream, subject string, from pglogrepl.LSN, first, last uint64) (uint64, error) {
	// before reports whether the first relay message at or after seq
	// precedes from (false when there is none).
	before := func(seq uint64) (bool, error) {
		for {
			m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return false, nil
			}
			if err != nil {
				return false, fmt.Errorf("read the stream's tail: %w", err)
			}
			// Messages published from the table (commit LSN 0: at the slot's
			// creation, or by verify --republish) have no place in WAL order.
			if ev, ok := ParseStored(m); ok && ev.Position.CommitLSN != 0 {
				return ev.Position.CommitLSN < from, nil
			}
			seq = m.Sequence + 1
		}
	}
	if ok, err := before(last); err != nil || ok {
		return last + 1, err
	}
	// Walk back in doubling steps to a sequence before from.
	hi := last // before(hi) is false
	var lo uint64
	for step := uint64(1); ; step *= 2 {
		if last < first+step {
			ok, err := before(first)
			if err != nil || !ok {
				return first, err
			}
			lo = first
			break
		}
		ok, err := before(last - step)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = last - step
			break
		}
		hi = last - step
	}
	// before(lo) holds, before(hi) does not: find where it changes.
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		ok, err := before(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}
