package jetstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Errors a publish can end with. Every one of them is retried in order,
// except a *ServerError that Permanent reports, which sends the event to
// the dead-letter subject.
var (
	// ErrAckTimeout: no reply within the ack timeout. The message may or
	// may not be stored (JetStream sends no reply on some store errors).
	ErrAckTimeout = errors.New("no PubAck within the ack timeout")
	// ErrDisconnected: the connection dropped while the publish was in
	// flight; the message may or may not be stored.
	ErrDisconnected = errors.New("connection to NATS lost with the publish in flight")
	// ErrNoResponders: nothing answered on the subject: JetStream is down,
	// still starting, or no stream listens on it.
	ErrNoResponders = errors.New("no responders: JetStream did not answer on the subject")
	// ErrBadReply: the reply was not a PubAck.
	ErrBadReply = errors.New("reply is not a JetStream PubAck")

	// errReconnected: the client reconnected with the publish in flight on
	// the old connection.
	errReconnected = fmt.Errorf("%w: the client reconnected before its PubAck arrived", ErrDisconnected)
)

// ServerError is an error JetStream returned for a publish.
type ServerError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("JetStream refused the message: %s (code %d, error %d)", e.Description, e.Code, e.ErrCode)
}

// JetStream error codes the relay treats specially.
const (
	errCodeMessageTooLarge = 10054 // message size exceeds maximum allowed
	errCodeHeaderTooLarge  = 10097 // header size exceeds maximum allowed of 64k
	errCodeStoreFailed     = 10077 // store failure, e.g. "maximum messages exceeded" with discard new
	// errCodeWrongLastSequence refuses recovery's guarded probe: its
	// subject changed since recovery read the stream (see subjectGuard).
	errCodeWrongLastSequence = 10071
)

// Permanent reports whether err can never succeed for this message, however
// often it is retried: the event then goes to the dead-letter subject.
func Permanent(err error) bool {
	var se *ServerError
	if !errors.As(err, &se) {
		return false
	}
	return se.ErrCode == errCodeMessageTooLarge || se.ErrCode == errCodeHeaderTooLarge
}

// Hint tells an operator what to do about a publish error.
func Hint(err error) string {
	var se *ServerError
	switch {
	case Permanent(err):
		return "the event can never be published as it is: it goes to the dead-letter subject"
	case errors.As(err, &se) && se.ErrCode == errCodeStoreFailed:
		return "the stream is full or cannot store (limits with discard=new, or disk): raise max_msgs/max_bytes or free space; the relay retries until it has room"
	case errors.As(err, &se) && se.ErrCode == errCodeInsufficientResources:
		return "a NATS server has no JetStream storage left (insufficient resources): raise its max_file_store or free disk; the relay retries until it has room"
	case noRoom(err):
		return "the account's JetStream quota is used up: raise it or free room in its other streams; the relay retries until it has room"
	case errors.Is(err, ErrNoResponders):
		return "check that JetStream is enabled and the stream exists; the relay retries"
	case errors.Is(err, ErrAckTimeout), disconnected(err):
		return "the relay republishes with the same Nats-Msg-Id once NATS answers again"
	default:
		return "the relay retries with backoff"
	}
}

// disconnected reports whether err means the connection to NATS is down.
func disconnected(err error) bool {
	return errors.Is(err, ErrDisconnected) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// reply is a parsed PubAck.
type reply struct {
	stream    []byte // the stream's name (a view of the reply's data)
	streamSeq uint64
	duplicate bool
	err       error
}

var (
	pubAckPrefix = []byte(`{"stream":`)
	seqKey       = []byte(`"seq":`)
	errorKey     = []byte(`"error"`)
	duplicateKey = []byte(`"duplicate":`)
)

// parseReply reads a PubAck. The common reply has a fixed shape the server
// writes by hand ({"stream":"X","seq":N} and maybe "duplicate": true), read
// here without reflection; anything else goes through encoding/json.
func parseReply(m *nats.Msg) reply {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return reply{err: ErrNoResponders}
		}
		return reply{err: ErrBadReply}
	}
	if bytes.HasPrefix(m.Data, pubAckPrefix) && !bytes.Contains(m.Data, errorKey) {
		stream, ok := fastStream(m.Data)
		if seq, ok2 := fastSeq(m.Data); ok && ok2 {
			return reply{stream: stream, streamSeq: seq, duplicate: fastDuplicate(m.Data)}
		}
	}
	var full struct {
		Error     *ServerError `json:"error"`
		Stream    string       `json:"stream"`
		Seq       uint64       `json:"seq"`
		Duplicate bool         `json:"duplicate"`
	}
	if err := json.Unmarshal(m.Data, &full); err != nil {
		return reply{err: fmt.Errorf("%w: %q", ErrBadReply, m.Data)}
	}
	if full.Error != nil {
		return reply{err: full.Error}
	}
	if full.Stream == "" {
		return reply{err: fmt.Errorf("%w: %q", ErrBadReply, m.Data)}
	}
	return reply{stream: []byte(full.Stream), streamSeq: full.Seq, duplicate: full.Duplicate}
}

// fastStream returns the stream name of a PubAck that starts with
// pubAckPrefix, unless it needs unescaping.
func fastStream(data []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(data[len(pubAckPrefix):], []byte(`"`))
	if !ok {
		return nil, false
	}
	i := bytes.IndexByte(rest, '"')
	if i <= 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return nil, false
	}
	return rest[:i], true
}

func fastSeq(data []byte) (uint64, bool) {
	i := bytes.Index(data, seqKey)
	if i < 0 {
		return 0, false
	}
	var seq uint64
	digits := 0
	for _, c := range bytes.TrimLeft(data[i+len(seqKey):], " ") {
		if c < '0' || c > '9' || digits == 19 {
			break
		}
		seq = seq*10 + uint64(c-'0')
		digits++
	}
	return seq, seq > 0
}

func fastDuplicate(data []byte) bool {
	i := bytes.Index(data, duplicateKey)
	return i >= 0 && bytes.HasPrefix(bytes.TrimLeft(data[i+len(duplicateKey):], " "), []byte("true"))
}
