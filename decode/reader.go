package decode

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// errShort is returned when a message ends before a field it announces.
var errShort = errors.New("message is truncated")

// reader walks one pgoutput message. Every accessor checks bounds: a
// truncated or hostile message yields an error, never a panic. The first
// error sticks; later reads return zero values.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.fail(fmt.Errorf("%w at byte %d: need %d more bytes, have %d", errShort, r.off, n, len(r.b)-r.off))
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8() byte {
	s := r.take(1)
	if s == nil {
		return 0
	}
	return s[0]
}

func (r *reader) u16() uint16 {
	s := r.take(2)
	if s == nil {
		return 0
	}
	return binary.BigEndian.Uint16(s)
}

func (r *reader) u32() uint32 {
	s := r.take(4)
	if s == nil {
		return 0
	}
	return binary.BigEndian.Uint32(s)
}

func (r *reader) u64() uint64 {
	s := r.take(8)
	if s == nil {
		return 0
	}
	return binary.BigEndian.Uint64(s)
}

// cstring reads a NUL-terminated string and returns it without the NUL.
// The result aliases the message buffer.
func (r *reader) cstring() []byte {
	if r.err != nil {
		return nil
	}
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := r.b[r.off:i]
			r.off = i + 1
			return s
		}
	}
	r.fail(fmt.Errorf("%w at byte %d: string has no terminating NUL", errShort, r.off))
	return nil
}

// done reports an error when bytes are left over: pgoutput messages have an
// exact length, so trailing bytes mean we misread the message.
func (r *reader) done() error {
	if r.err != nil {
		return r.err
	}
	if r.off != len(r.b) {
		return fmt.Errorf("%d unexpected trailing bytes", len(r.b)-r.off)
	}
	return nil
}
