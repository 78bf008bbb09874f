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
	codeCrashShutdown      = "57P02"
	codeCannotConnectNow   = "57P03"
)

// FatalError is an error that retrying cannot fix: the relay stops and
// the message says what to do.
type FatalError struct {
	Err  error
	Hint string
}

func (e *FatalError) Error() string {
	if e.Hint == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Hint
}

func (e *FatalError) Unwrap() error { return e.Err }

// Fatal marks the error as one retrying cannot fix.
func (e *FatalError) Fatal() bool { return true }

func fatal(err error, hint string, args ...any) error {
	return &FatalError{Err: err, Hint: fmt.Sprintf(hint, args...)}
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
		return fatal(err, "the slot or publication disappeared while the relay was using it; WAL decoded without it may hold events the stream lacks: restore the publication if it is gone, then start the relay once with --recreate-slot (it publishes every committed row the stream lacks)")
	case codeNotInPrerequisite:
		return fatal(err, "the slot can no longer be used (invalidated, for example by max_slot_wal_keep_size) or wal_level is not logical; events after the slot's last position may be missing: start the relay once with --recreate-slot (it publishes every committed row the stream lacks)")
	case codeInsufficientPriv, codeInvalidAuthSpec, codeInvalidPassword:
		return fatal(err, "the role needs LOGIN and REPLICATION (ALTER ROLE %s REPLICATION) and a pg_hba.conf entry for database %q", s.cfg.Repl.User, s.cfg.Repl.Database)
	case codeInvalidCatalogName:
		return fatal(err, "check the database name in --pg-url")
	}
	return err
}

// serverGoingAway reports whether err says Postgres is shutting down or
// restarting: no point reporting it as a failure, just reconnect later.
func serverGoingAway(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow:
			return true
		}
	}
	return false
}
