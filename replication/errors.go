package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATE codes the relay acts on.
const (
	codeObjectInUse        = "55006" // replication slot is active for another PID
	codeUndefinedObject    = "42704" // slot or publication does not exist
	codeNotInPrerequisite  = "55000" // slot invalidated; wal_level not logical
	codeInsufficientPriv   = "42501"
	codeInvalidAuthSpec    = "28000"
	codeInvalidPassword    = "28P01"
	codeInvalidCatalogName = "3D000" // database does not exist
	codeConfigLimit        = "53400" // all replication slots are in use
	codeAdminShutdown      = "57P01"
)

// ErrGap means events may be missing from the stream: WAL was lost or not
// decoded, so rows committed in between may never have been published.
// Retrying cannot fix it; publishing from a new slot's snapshot every
// committed row the stream lacks can. Errors that mean a gap wrap it: test
// with errors.Is(err, ErrGap).
var ErrGap = errors.New("events may be missing from the stream")

// FatalError is an error that retrying cannot fix: the relay stops and
// the message says what happened and, when the library knows, what to do.
type FatalError struct {
	Err  error
	Hint string
	// Gap marks a FatalError that means events may be missing from the
	// stream: errors.Is(err, ErrGap) is then true.
	Gap bool
}

func (e *FatalError) Error() string {
	if e.Hint == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Hint
}

func (e *FatalError) Unwrap() error { return e.Err }

// Is reports whether target is ErrGap and the error means a gap.
func (e *FatalError) Is(target error) bool { return e.Gap && target == ErrGap }

// Fatal marks the error as one retrying cannot fix.
func (e *FatalError) Fatal() bool { return true }

func fatal(err error, hint string, args ...any) error {
	return &FatalError{Err: err, Hint: fmt.Sprintf(hint, args...)}
}

// gap is fatal for an error that means events may be missing: it wraps
// ErrGap. The hint says what happened; the caller adds how to repair.
func gap(err error, hint string, args ...any) error {
	return &FatalError{Err: err, Hint: fmt.Sprintf(hint, args...), Gap: true}
}

// errSlotBusy means another process streams from the slot: this relay waits
// as a standby.
var errSlotBusy = errors.New("replication slot is in use by another process")

// classify turns a session error into a FatalError, errSlotBusy, or leaves
// it transient (returned as is, retried with backoff).
func (s *Stream) classify(err error) error {
	var fe *FatalError
	if errors.As(err, &fe) || errors.Is(err, context.Canceled) {
		return err
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case codeObjectInUse:
		return fmt.Errorf("%w: %s", errSlotBusy, pe.Message)
	case codeUndefinedObject:
		return gap(err, "the slot or publication disappeared while the relay was using it; WAL decoded without it may hold events the stream lacks: restore the publication first if it is gone")
	case codeNotInPrerequisite:
		return gap(err, "the slot can no longer be used (invalidated, for example by max_slot_wal_keep_size) or wal_level is not logical; events after the slot's last position may be missing")
	case codeInsufficientPriv, codeInvalidAuthSpec, codeInvalidPassword:
		return fatal(err, "the role needs LOGIN and REPLICATION (ALTER ROLE %s REPLICATION) and a pg_hba.conf entry for database %q", s.cfg.Repl.User, s.cfg.Repl.Database)
	case codeInvalidCatalogName:
		return fatal(err, "check the database name in the connection string")
	}
	return err
}
