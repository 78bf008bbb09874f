package contract

import "errors"

// The errors every package and tool agree on: a FatalError means stop,
// do not retry; ErrGap means events may be missing from the stream.

// ErrGap means events may be missing from the stream: WAL was lost or not
// decoded, so rows committed in between may never have been published.
// Retrying cannot fix it; publishing from a new slot's snapshot every
// committed row the stream lacks can. Errors that mean a gap wrap it: test
// with errors.Is(err, ErrGap).
var ErrGap = errors.New("events may be missing from the stream")

// FatalError is an error that retrying cannot fix: the relay stops and
// the message says what happened and, when the library knows, what to do.
type FatalError struct {
	// Err is what happened.
	Err error
	// Hint, when set, says what to do about it.
	Hint string
	// Gap marks a FatalError that means events may be missing from the
	// stream: errors.Is(err, ErrGap) is then true.
	Gap bool
}

// Error returns the cause's message, followed by the hint when there is
// one.
func (e *FatalError) Error() string {
	if e.Hint == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Hint
}

// Unwrap returns the cause.
func (e *FatalError) Unwrap() error { return e.Err }

// Is reports whether target is ErrGap and the error means a gap.
func (e *FatalError) Is(target error) bool { return e.Gap && target == ErrGap }

// Fatal marks the error as one retrying cannot fix.
func (e *FatalError) Fatal() bool { return true }
