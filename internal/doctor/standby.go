package doctor

import (
	"context"
	"errors"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/replication"
)

// StandbyOptions say where CheckStandby looks.
type StandbyOptions struct {
	// PGURL is the relay's --pg-url, PrimaryURL its --primary-url (empty
	// for a relay that reads from a primary).
	PGURL, PrimaryURL string
	// Slot is the relay's slot.
	Slot string
}

// CheckStandby is doctor's postgres.standby findings: without
// --primary-url the server must be a primary (the relay writes its record
// there); with it, --pg-url must be a hot standby the relay can read from
// (docs/standby.md): the pair what replication.CheckStandbyRead asks for,
// --pg-url one host, and the slot's name free on the primary. It reports
// whether a server could not be reached.
func CheckStandby(ctx context.Context, o StandbyOptions) (fs []Finding, unreachable bool) {
	const check = "postgres.standby"
	poolCfg, _, err := replication.ParseConnString(o.PGURL)
	if err != nil {
		return []Finding{{Check: check, Severity: Error, Message: err.Error()}}, true
	}
	pool, err := core.PingPool(ctx, poolCfg)
	if err != nil {
		return []Finding{{Check: check, Severity: Error, Message: err.Error()}}, true
	}
	defer pool.Close()
	where := replication.Describe(&pool.Config().ConnConfig.Config)
	if o.PrimaryURL == "" {
		if err := replication.CheckPrimary(ctx, pool, where); err != nil {
			return []Finding{errorFinding(check, err)}, false
		}
		return []Finding{{Check: check, Severity: OK, Message: "the server is a primary (it accepts the relay's record)"}}, false
	}
	if err := replication.CheckOneHost(&pool.Config().ConnConfig.Config); err != nil {
		return []Finding{errorFinding(check, err)}, false
	}
	primaryCfg, err := replication.ParsePrimaryConnString(o.PrimaryURL)
	if err != nil {
		return []Finding{{Check: check, Severity: Error, Message: err.Error(), Fix: "check --primary-url's syntax"}}, false
	}
	primary, err := core.PingPool(ctx, primaryCfg)
	if err != nil {
		return []Finding{{Check: check, Severity: Error, Message: "--primary-url: " + err.Error(), Fix: "check --primary-url (host, port, user, password, database) and that the primary accepts this client (pg_hba.conf)"}}, true
	}
	defer primary.Close()
	source := replication.Server{Pool: pool, Where: where}
	prim := replication.Server{Pool: primary, Where: replication.Describe(&primaryCfg.ConnConfig.Config)}
	found, err := replication.CheckStandbyRead(ctx, source, prim)
	if err == nil {
		err = replication.CheckStandbySlot(ctx, source, prim, o.Slot)
	}
	if err != nil {
		return []Finding{errorFinding(check, err)}, false
	}
	for _, w := range found.Warnings {
		fs = append(fs, Finding{Check: check, Severity: Warn, Message: w})
	}
	return append(fs, Finding{Check: check, Severity: OK, Message: "--pg-url is a hot standby the relay can read from (Postgres 16+, hot_standby_feedback on, the primary's wal_level logical); its record is kept on --primary-url"}), false
}

// errorFinding turns a check's error into a finding, its hint the fix.
func errorFinding(check string, err error) Finding {
	var fe *contract.FatalError
	if errors.As(err, &fe) {
		return Finding{Check: check, Severity: Error, Message: fe.Err.Error(), Fix: fe.Hint}
	}
	return Finding{Check: check, Severity: Error, Message: err.Error()}
}
