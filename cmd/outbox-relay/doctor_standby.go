package main

import (
	"context"
	"errors"

	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/replication"
)

// checkStandby is doctor's postgres.standby finding: without --primary-url
// the server must be a primary (the relay writes its record there); with
// it, --pg-url may be a hot standby the relay reads from (docs/standby.md),
// and the pair must be what replication.CheckStandbyRead asks for.
func (c *doctorCmd) checkStandby(ctx context.Context) doctor.Finding {
	const check = "postgres.standby"
	pool, err := pingPool(ctx, c.PGURL)
	if err != nil {
		return doctor.Finding{Check: check, Severity: doctor.Error, Message: err.Error()}
	}
	defer pool.Close()
	where := replication.Describe(&pool.Config().ConnConfig.Config)
	if c.PrimaryURL == "" {
		if err := replication.CheckPrimary(ctx, pool, where); err != nil {
			return errorFinding(check, err)
		}
		return doctor.Finding{Check: check, Severity: doctor.OK, Message: "the server is a primary (it accepts the relay's record)"}
	}
	primary, err := pingPool(ctx, c.PrimaryURL)
	if err != nil {
		return doctor.Finding{Check: check, Severity: doctor.Error, Message: err.Error(), Fix: "check --primary-url (host, port, user, password, database)"}
	}
	defer primary.Close()
	standby, err := replication.CheckStandbyRead(ctx, replication.Server{Pool: pool, Where: where},
		replication.Server{Pool: primary, Where: replication.Describe(&primary.Config().ConnConfig.Config)})
	switch {
	case err != nil:
		return errorFinding(check, err)
	case standby:
		return doctor.Finding{Check: check, Severity: doctor.OK, Message: "--pg-url is a hot standby the relay can read from (Postgres 16+, hot_standby_feedback on, the primary's wal_level logical); its record is kept on --primary-url"}
	}
	return doctor.Finding{Check: check, Severity: doctor.OK, Message: "--pg-url is the primary itself: --primary-url is not needed"}
}

// errorFinding turns a check's error into a finding, its hint the fix.
func errorFinding(check string, err error) doctor.Finding {
	var fe *replication.FatalError
	if errors.As(err, &fe) {
		return doctor.Finding{Check: check, Severity: doctor.Error, Message: fe.Err.Error(), Fix: fe.Hint}
	}
	return doctor.Finding{Check: check, Severity: doctor.Error, Message: err.Error()}
}
