package jetstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Failures of fast-ingest batches. Each sends the Publisher to recovery.
var (
	// ErrBatchGap: the server saw a batch's messages out of sequence (one
	// lost on the way) and ended the batch.
	ErrBatchGap = errors.New("the server reported a gap in a fast-ingest batch")
	// ErrBatchEnded: the server ended the batch before this message (an
	// error on an earlier one, an abandoned batch): it was not stored, or
	// its outcome is unknown.
	ErrBatchEnded = errors.New("the server ended the fast-ingest batch before this message was confirmed")
)

// errCodeBatchDisabled refuses a batch message: the stream no longer
// allows batched publishing (allow_batched turned off).
const errCodeBatchDisabled = 10205

// fastMsg is any reply on the batch inbox.
type fastMsg struct {
	Type string `json:"type"`
	// ack: every message up to Seq is stored; gap: the message Seq came
	// when LastSeq was expected; err: message Seq was refused.
	Seq     uint64       `json:"seq"`
	LastSeq uint64       `json:"last_seq"`
	Error   *ServerError `json:"error"`
	// A commit's PubAck.
	Stream string `json:"stream"`
	Batch  string `json:"batch"`
	Count  uint64 `json:"count"`
}

var flowAckPrefix = []byte(`{"type":"ack","seq":`)

// onFastReply handles a reply to a batch message.
func (p *Publisher) onFastReply(m *nats.Msg) {
	id, bseq, ok := p.parseFastReply(m.Subject)
	if !ok {
		return
	}
	if bytes.HasPrefix(m.Data, flowAckPrefix) { // the common reply, read without reflection
		if seq, ok := fastSeq(m.Data); ok {
			p.mu.Lock()
			p.fastStoredLocked(id, seq, reply{})
			p.fastConfirmedLocked()
			p.mu.Unlock()
			return
		}
	}
	var r fastMsg
	var err error
	switch {
	case len(m.Data) == 0 && m.Header.Get("Status") == "503":
		err = ErrNoResponders
	case len(m.Data) == 0:
		err = ErrBadReply
	default:
		if jerr := json.Unmarshal(m.Data, &r); jerr != nil {
			err = fmt.Errorf("%w: %q", ErrBadReply, m.Data)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.fastConfirmedLocked()
	switch {
	case err != nil:
		p.fastFailLocked(id, 0, err, 0, nil)
	case r.Type == "ack":
		p.fastStoredLocked(id, r.Seq, reply{})
	case r.Type == "gap":
		p.fastFailLocked(id, 0, fmt.Errorf("%w: expected message %d, got %d", ErrBatchGap, r.LastSeq, r.Seq), 0, nil)
	case r.Type == "err":
		// The server commits what it stored before r.Seq and skips the
		// rest: the commit's PubAck confirms the former.
		p.fastFailLocked(id, r.Seq, batchEnded(r.Error), r.Seq, r.Error)
	case r.Error != nil:
		// A refused start, an unknown (abandoned) batch, a stream that no
		// longer allows batches: this message and any after it.
		if r.Error.ErrCode == errCodeBatchDisabled && !p.fi.off {
			p.fi.off = true
			p.log.Warn().Err(r.Error).Msg("the stream no longer allows batched publishing: publishing each event with its own PubAck from now on")
		}
		p.fastFailLocked(id, 0, batchEnded(r.Error), bseq, r.Error)
	case r.Batch == "" && r.Stream != "":
		// An ordinary PubAck: a server (a stream leader) that does not
		// know fast ingest stored this one message.
		p.fastStoredOneLocked(id, bseq, reply{stream: []byte(r.Stream), streamSeq: r.Seq})
	case r.Stream != "":
		// The batch committed: everything up to Count is stored, nothing
		// after it.
		p.fastStoredLocked(id, r.Count, reply{stream: []byte(r.Stream), streamSeq: r.Seq})
		p.fastFailLocked(id, r.Count+1, ErrBatchEnded, 0, nil)
	default:
		p.fastFailLocked(id, 0, fmt.Errorf("%w: %q", ErrBadReply, m.Data), 0, nil)
	}
}

// fastStoredLocked stores every message of batch id up to batch sequence
// through; the last one's reply is last (a commit's names its stream
// sequence). A message failed meanwhile counts as stored too: any
// attempt's confirmation means the stream holds it.
func (p *Publisher) fastStoredLocked(id, through uint64, last reply) {
	for seq := p.head; seq < p.next; seq++ {
		s := &p.ring[seq&p.mask]
		if s.fiBatch > id {
			break // sent after the batch: so is everything later
		}
		if s.fiBatch != id || (s.state != sent && s.state != failed) {
			continue
		}
		if s.fiSeq > through {
			break
		}
		r := reply{}
		if s.fiSeq == through {
			r = last
		}
		p.storedLocked(s, r)
	}
}

// fastStoredOneLocked stores the message at batch sequence bseq of batch id.
func (p *Publisher) fastStoredOneLocked(id, bseq uint64, r reply) {
	for seq := p.head; seq < p.next; seq++ {
		if s := &p.ring[seq&p.mask]; s.fiBatch == id && s.fiSeq == bseq && (s.state == sent || s.state == failed) {
			p.storedLocked(s, r)
			return
		}
	}
}

// fastFailLocked fails the messages of batch id still on the wire from
// batch sequence from on: with err, except the one at at, with atErr
// (nil: err), which may be a refusal that sends it to the dead-letter
// subject.
func (p *Publisher) fastFailLocked(id, from uint64, err error, at uint64, atErr *ServerError) {
	if p.fi.id == id {
		p.fi.open = false
	}
	for seq := p.head; seq < p.next; seq++ {
		s := &p.ring[seq&p.mask]
		if s.fiBatch != id || s.state != sent || s.fiSeq < from {
			continue
		}
		s.state = failed
		if s.fiSeq == at && atErr != nil {
			p.refusedLocked(s, atErr)
			continue
		}
		p.failLocked(err, s)
	}
}

// refusedLocked fails slot s with the server's refusal, as settle does
// for an ordinary PubAck: a permanent one sends it to the dead-letter
// subject (on an ordinary publish, after recovery).
func (p *Publisher) refusedLocked(s *slot, se *ServerError) {
	if Permanent(se) {
		if s.deadLetter == "" && s.ev.Problem == "" {
			s.deadLetter = se.Error()
		} else {
			s.bare = true
		}
		p.limitsChanged = true
	}
	p.failLocked(se, s)
}

// batchEnded is the error of a batch's messages the server skipped after
// refusing another with se (nil: no reason given). It names the refusal
// without wrapping it: only the refused message may be a dead letter.
func batchEnded(se *ServerError) error {
	if se == nil {
		return ErrBatchEnded
	}
	return fmt.Errorf("%w (%s)", ErrBatchEnded, se.Description)
}
