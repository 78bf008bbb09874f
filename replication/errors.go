package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/contract"
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

// fatal is an error retrying cannot fix (a contract.FatalError): the relay
// stops, and the hint says what to do.
func fatal(err error, hint string, args ...any) error {
	return &contract.FatalError{Err: err, Hint: fmt.Sprintf(hint, args...)}
}

// gap is fatal for an error that means events may be missing: it wraps
// contract.ErrGap. The hint says what happened; the caller adds how to
// repair.
func gap(err error, hint string, args ...any) error {
	return &contract.FatalError{Err: err, Hint: fmt.Sprintf(hint, args...), Gap: true}
}

// errSlotBusy means another process streams from the slot: this relay waits
// as a standby.
var errSlotBusy = errors.New("replication slot is in use by another process")

// classify turns a session error into a contract.FatalError, errSlotBusy,
// or leaves it transient (returned as is, retried with backoff).
func (s *Stream) classify(err error) error {
	var fe *contract.FatalError
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
