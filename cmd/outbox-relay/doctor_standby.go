package main

import (
	"context"
	"errors"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/replication"
)

// errPrimaryWithPoll refuses --primary-url with --source poll, in run and
// doctor alike.
var errPrimaryWithPoll = errors.New("--primary-url is for --source wal (reading from a standby's slot); the polling relay writes to the table it reads: point --pg-url at the primary")

// checkStandby is doctor's postgres.standby findings: without
// --primary-url the server must be a primary (the relay writes its record
// there); with it, --pg-url must be a hot standby the relay can read from
// (docs/standby.md): the pair what replication.CheckStandbyRead asks for,
// --pg-url one host, and the slot's name free on the primary. It reports
// whether a server could not be reached.
func (c *doctorCmd) checkStandby(ctx context.Context, slot string) (fs []doctor.Finding, unreachable bool) {
	const check = "postgres.standby"
	pool, err := pingPool(ctx, c.PGURL)
	if err != nil {
		return []doctor.Finding{{Check: check, Severity: doctor.Error, Message: err.Error()}}, true
	}
	defer pool.Close()
	where := replication.Describe(&pool.Config().ConnConfig.Config)
	if c.PrimaryURL == "" {
		if err := replication.CheckPrimary(ctx, pool, where); err != nil {
			return []doctor.Finding{errorFinding(check, err)}, false
		}
		return []doctor.Finding{{Check: check, Severity: doctor.OK, Message: "the server is a primary (it accepts the relay's record)"}}, false
	}
	if err := replication.CheckOneHost(&pool.Config().ConnConfig.Config); err != nil {
		return []doctor.Finding{errorFinding(check, err)}, false
	}
	primaryCfg, err := replication.ParsePrimaryConnString(c.PrimaryURL)
	if err != nil {
		return []doctor.Finding{{Check: check, Severity: doctor.Error, Message: err.Error(), Fix: "check --primary-url's syntax"}}, false
	}
	primary, err := pingConfig(ctx, primaryCfg)
	if err != nil {
		return []doctor.Finding{{Check: check, Severity: doctor.Error, Message: "--primary-url: " + err.Error(), Fix: "check --primary-url (host, port, user, password, database) and that the primary accepts this client (pg_hba.conf)"}}, true
	}
	defer primary.Close()
	source := replication.Server{Pool: pool, Where: where}
	prim := replication.Server{Pool: primary, Where: replication.Describe(&primaryCfg.ConnConfig.Config)}
	found, err := replication.CheckStandbyRead(ctx, source, prim)
	if err == nil {
		err = replication.CheckStandbySlot(ctx, source, prim, slot)
	}
	if err != nil {
		return []doctor.Finding{errorFinding(check, err)}, false
	}
	for _, w := range found.Warnings {
		fs = append(fs, doctor.Finding{Check: check, Severity: doctor.Warn, Message: w})
	}
	return append(fs, doctor.Finding{Check: check, Severity: doctor.OK, Message: "--pg-url is a hot standby the relay can read from (Postgres 16+, hot_standby_feedback on, the primary's wal_level logical); its record is kept on --primary-url"}), false
}

// errorFinding turns a check's error into a finding, its hint the fix.
func errorFinding(check string, err error) doctor.Finding {
	var fe *contract.FatalError
	if errors.As(err, &fe) {
		return doctor.Finding{Check: check, Severity: doctor.Error, Message: fe.Err.Error(), Fix: fe.Hint}
	}
	return doctor.Finding{Check: check, Severity: doctor.Error, Message: err.Error()}
}
