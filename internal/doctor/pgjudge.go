package doctor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/replication"
)

// repairAdvice is the way back from a lost slot.
const repairAdvice = "start the relay once with --recreate-slot: it creates a new slot and publishes from its snapshot every committed row the stream lacks"

// pgFindings judges what readPG found.
func pgFindings(f pgFacts, o PGOptions) []Finding {
	var out []Finding
	out = append(out, preflightFindings(f, o)...)
	out = append(out, publicationFindings(f, o)...)
	out = append(out, capacityFindings(f)...)
	out = append(out, walKeepFinding(f), senderTimeoutFinding(f, o))
	out = append(out, managedFindings(f)...)
	out = append(out, grantFindings(f, o)...)
	out = append(out, slotFindings(f, o)...)
	return append(out, otherSlotFindings(f, o)...)
}

// preflightFindings turns replication.Preflight's problems into errors, and
// says ok for each check it passed.
func preflightFindings(f pgFacts, o PGOptions) []Finding {
	passed := map[string]string{
		replication.ProblemWALLevel:    "wal_level = logical",
		replication.ProblemRole:        fmt.Sprintf("role %q may replicate (%s)", f.Role.Name, roleAttributes(f.Role)),
		replication.ProblemPublication: fmt.Sprintf("publication %q publishes the inserts of %s", o.Publication, o.tableNames()),
		replication.ProblemTable:       fmt.Sprintf("table %s has the columns the relay reads", o.tableNames()),
	}
	var out []Finding
	for _, p := range f.Preflight {
		out = append(out, problem(Error, "postgres."+p.Check, p.Fix, "%s", p.What))
		delete(passed, p.Check)
	}
	for _, check := range []string{replication.ProblemWALLevel, replication.ProblemRole, replication.ProblemPublication, replication.ProblemTable} {
		if msg, ok := passed[check]; ok {
			out = append(out, Finding{Check: "postgres." + check, Severity: OK, Message: msg})
		}
	}
	return out
}

func roleAttributes(r replication.Role) string {
	var a []string
	if r.Superuser {
		a = append(a, "superuser")
	}
	if r.Replication {
		a = append(a, "REPLICATION")
	}
	if r.RDSReplication {
		a = append(a, "member of rds_replication")
	}
	return strings.Join(a, ", ")
}

// publicationFindings warns about what the publication sends beyond the
// table's inserts: Postgres decodes and sends it, the relay drops it.
func publicationFindings(f pgFacts, o PGOptions) []Finding {
	if !f.Pub.Exists {
		return nil
	}
	var out []Finding
	var extra []string
	for _, e := range []struct {
		on   bool
		name string
	}{{f.Pub.Update, "update"}, {f.Pub.Delete, "delete"}, {f.Pub.Truncate, "truncate"}} {
		if e.on {
			extra = append(extra, e.name)
		}
	}
	if len(extra) > 0 {
		out = append(out, problem(Warn, "postgres.publication_actions", fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert')", o.Publication),
			"publication %q also publishes %s: harmless, but Postgres decodes and sends every such change for the relay to drop (a retention job's deletes too)",
			o.Publication, strings.Join(extra, ", ")))
	}
	if f.Pub.AllTables {
		out = append(out, problem(Warn, "postgres.publication_tables",
			fmt.Sprintf("CREATE PUBLICATION outbox_only FOR TABLE %s WITH (publish = 'insert'); and point --publication at it (the relay refuses a publication changed under an existing slot: plan it with a new --slot)", quotedTables(o.tables())),
			"publication %q is FOR ALL TABLES: the inserts of every table are decoded and sent to the relay, which drops all but %s", o.Publication, o.tableNames()))
	}
	return out
}

// capacityFindings: a relay needs a free slot to create its own and a free
// WAL sender to stream.
func capacityFindings(f pgFacts) []Finding {
	var out []Finding
	maxSlots, _ := strconv.Atoi(f.Settings["max_replication_slots"])
	free := maxSlots - f.SlotsUsed
	switch {
	case f.Slot.Exists:
		out = append(out, ok("postgres.replication_slots", "the relay's slot exists; %d of max_replication_slots = %d in use", f.SlotsUsed, maxSlots))
	case free < 1:
		out = append(out, problem(Error, "postgres.replication_slots",
			fmt.Sprintf("ALTER SYSTEM SET max_replication_slots = %d; then restart Postgres. Or drop a slot nobody uses: SELECT slot_name, active, wal_status FROM pg_replication_slots; SELECT pg_drop_replication_slot('<name>');", maxSlots+2),
			"no free replication slot for the relay to create its own: %d of max_replication_slots = %d in use", f.SlotsUsed, maxSlots))
	default:
		out = append(out, ok("postgres.replication_slots", "%d of max_replication_slots = %d free", free, maxSlots))
	}
	maxSenders, _ := strconv.Atoi(f.Settings["max_wal_senders"])
	freeSenders := maxSenders - f.SendersUsed
	switch {
	case f.Slot.Active:
		out = append(out, ok("postgres.wal_senders", "the relay streams; %d of max_wal_senders = %d in use", f.SendersUsed, maxSenders))
	case freeSenders < 1:
		out = append(out, problem(Error, "postgres.wal_senders",
			fmt.Sprintf("ALTER SYSTEM SET max_wal_senders = %d; then restart Postgres (standbys and backups use WAL senders too)", maxSenders+2),
			"no free WAL sender for the relay's replication connection: %d of max_wal_senders = %d in use", f.SendersUsed, maxSenders))
	default:
		out = append(out, ok("postgres.wal_senders", "%d of max_wal_senders = %d free", freeSenders, maxSenders))
	}
	return out
}

// walKeepFinding: both settings of max_slot_wal_keep_size carry a risk the
// operator must choose: a full disk or an invalidated slot.
func walKeepFinding(f pgFacts) Finding {
	const check = "postgres.max_slot_wal_keep_size"
	mb, err := strconv.ParseInt(f.Settings["max_slot_wal_keep_size"], 10, 64)
	if err != nil {
		return info(check, "max_slot_wal_keep_size not readable (%q)", f.Settings["max_slot_wal_keep_size"])
	}
	if mb < 0 {
		return problem(Warn, check, "ALTER SYSTEM SET max_slot_wal_keep_size = '50GB'; SELECT pg_reload_conf(); -- a size the WAL disk holds beside normal use; and alert on outbox_relay_slot_lag_bytes",
			"max_slot_wal_keep_size = -1 (unbounded): while the relay is stopped or behind, the slot keeps every WAL segment; the disk can fill and stop Postgres")
	}
	size := HumanBytes(mb << 20)
	return problem(Warn, check, fmt.Sprintf("alert on outbox_relay_slot_lag_bytes well below %s and on wal_status 'unreserved'; to allow longer outages: ALTER SYSTEM SET max_slot_wal_keep_size = '<larger>'; SELECT pg_reload_conf();", size),
		"max_slot_wal_keep_size = %s: once the slot holds more WAL than that, Postgres invalidates it (wal_status lost); the relay then stops with a gap and must be started once with --recreate-slot, which republishes from the table what the stream lacks", size)
}

func senderTimeoutFinding(f pgFacts, o PGOptions) Finding {
	const check = "postgres.wal_sender_timeout"
	ms, err := strconv.ParseInt(f.Settings["wal_sender_timeout"], 10, 64)
	if err != nil {
		return info(check, "wal_sender_timeout not readable (%q)", f.Settings["wal_sender_timeout"])
	}
	timeout := time.Duration(ms) * time.Millisecond
	fix := "ALTER SYSTEM SET wal_sender_timeout = '60s'; SELECT pg_reload_conf();"
	switch {
	case timeout == 0:
		return problem(Warn, check, fix,
			"wal_sender_timeout = 0 (off): a relay that dies without closing its connection keeps the slot active until TCP gives up (minutes, up to ~15), and no other relay can take it over")
	case timeout < 2*o.StatusInterval:
		// The relay caps its interval at half of wal_sender_timeout.
		return info(check, "wal_sender_timeout = %s: the relay sends a status update at least every %s (half of it, below --status-interval %s)",
			timeout, timeout/2, o.StatusInterval)
	}
	return ok(check, "wal_sender_timeout = %s (the relay reports at least every %s)", timeout, o.StatusInterval)
}

// managedFindings shows the managed services' switches for logical decoding.
func managedFindings(f pgFacts) []Finding {
	fixes := map[string]string{
		"rds.logical_replication":   "set rds.logical_replication = 1 in the DB parameter group and reboot the instance",
		"cloudsql.logical_decoding": "gcloud sql instances patch <instance> --database-flags=cloudsql.logical_decoding=on (restarts the instance)",
	}
	var out []Finding
	for _, name := range managedFlags {
		v, present := f.Settings[name]
		if !present {
			continue
		}
		if v == "on" || v == "1" {
			out = append(out, ok("postgres.managed", "%s = %s", name, v))
		} else {
			out = append(out, problem(Error, "postgres.managed", fixes[name], "%s = %s: logical decoding is off on this managed service", name, v))
		}
	}
	return out
}

// grantFindings: the relay reads the table and writes its own records.
func grantFindings(f pgFacts, o PGOptions) []Finding {
	const check = "postgres.privileges"
	role := pgx.Identifier{f.Role.Name}.Sanitize()
	var out []Finding
	if !f.Grants.Connect {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT CONNECT ON DATABASE %s TO %s;", pgx.Identifier{f.Database}.Sanitize(), role),
			"role %q lacks CONNECT on database %q", f.Role.Name, f.Database))
	}
	if !f.Grants.TableExists {
		return out // replication.Preflight said so
	}
	if !f.Grants.SchemaUsage {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s;", pgx.Identifier{o.Table.Schema}.Sanitize(), role),
			"role %q lacks USAGE on schema %q", f.Role.Name, o.Table.Schema))
	}
	if !f.Grants.TableSelect {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT SELECT ON %s TO %s; (or outbox-relay migrate --relay-role %s)", o.Table.Quoted(), role, f.Role.Name),
			"role %q cannot SELECT from %s: the first start and --recreate-slot read the table", f.Role.Name, o.Table))
	}
	for _, g := range f.MoreGrants {
		out = append(out, moreTableGrantFindings(g, role, f.Role.Name)...)
	}
	for _, g := range f.Grants.Relay {
		switch {
		case !g.Exists:
			out = append(out, problem(Error, check, "outbox-relay migrate", "the relay's table %s does not exist", g.Table))
		case !g.Granted:
			out = append(out, problem(Error, check, fmt.Sprintf("GRANT %s ON %s TO %s; (or outbox-relay migrate --relay-role %s)", g.Privileges, g.Table, role, f.Role.Name),
				"role %q lacks %s on %s, where the relay keeps its records", f.Role.Name, g.Privileges, g.Table))
		}
	}
	if len(out) == 0 {
		out = append(out, ok(check, "role %q may connect, read %s and write the relay's records", f.Role.Name, o.tableNames()))
	}
	return out
}

// moreTableGrantFindings: the relay reads a further table of several too
// (a missing one is replication.Preflight's to say).
func moreTableGrantFindings(g tableGrant, role, roleName string) []Finding {
	const check = "postgres.privileges"
	if !g.Exists {
		return nil
	}
	var out []Finding
	if !g.SchemaUsage {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s;", pgx.Identifier{g.Table.Schema}.Sanitize(), role),
			"role %q lacks USAGE on schema %q", roleName, g.Table.Schema))
	}
	if !g.CanRead {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT SELECT ON %s TO %s; (or outbox-relay migrate --relay-role %s)", g.Table.Quoted(), role, roleName),
			"role %q cannot SELECT from %s: the first start and --recreate-slot read the table", roleName, g.Table))
	}
	return out
}

// quotedTables lists the tables quoted, comma-separated, for SQL text.
func quotedTables(tables []contract.Table) string {
	q := make([]string, len(tables))
	for i, t := range tables {
		q[i] = t.Quoted()
	}
	return strings.Join(q, ", ")
}

// slotFindings judges the relay's slot, when it exists.
func slotFindings(f pgFacts, o PGOptions) []Finding {
	const check = "postgres.slot"
	s := f.Slot
	if !s.Exists {
		return []Finding{info(check, "slot %q does not exist yet: `outbox-relay run` creates it", o.Slot)}
	}
	if err := replication.CheckSlot(s, o.Slot, f.Database); err != nil {
		fix := ""
		var fe *contract.FatalError
		if errors.As(err, &fe) {
			fix = fe.Hint
		}
		if errors.Is(err, contract.ErrGap) {
			fix = repairAdvice
		}
		return []Finding{problem(Error, check, fix, "%s", errMessage(err))}
	}
	if f.Invalidated != "" {
		return []Finding{problem(Error, check, repairAdvice, "slot %q was invalidated (%s)", o.Slot, f.Invalidated)}
	}
	lag := fmt.Sprintf("lag %s, wal_status %s, confirmed %s", HumanBytes(s.LagBytes), s.WALStatus, s.ConfirmedFlush)
	switch {
	case s.WALStatus == "unreserved":
		return []Finding{problem(Error, check, "start the relay now, or raise max_slot_wal_keep_size: ALTER SYSTEM SET max_slot_wal_keep_size = '<larger>'; SELECT pg_reload_conf();",
			"slot %q is about to be invalidated: it holds more WAL than max_slot_wal_keep_size (%s)", o.Slot, lag)}
	case !s.Active:
		since := ""
		if !f.InactiveSince.IsZero() {
			since = fmt.Sprintf(" since %s", f.InactiveSince.UTC().Format(time.RFC3339))
		}
		return []Finding{problem(Warn, check, fmt.Sprintf("start the relay (outbox-relay run); if the slot is no longer used: SELECT pg_drop_replication_slot('%s');", o.Slot),
			"slot %q is inactive%s: no relay streams from it and Postgres keeps its WAL (%s)", o.Slot, since, lag)}
	}
	return []Finding{ok(check, "slot %q is active (pid %d), %s", o.Slot, s.ActivePID, lag)}
}

// errMessage is an error's text without its FatalError hint, which the
// finding carries as its fix.
func errMessage(err error) string {
	var fe *contract.FatalError
	if errors.As(err, &fe) {
		return fe.Err.Error()
	}
	return err.Error()
}

// HumanBytes writes a byte count in binary units, one decimal: 1536 is
// "1.5 KiB". status prints the lag with it, as doctor does.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
