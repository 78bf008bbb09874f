package doctor

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/poll"
)

// pollFindings judges what readPoll found. The WAL relay's checks
// (wal_level, REPLICATION, publication, slots, WAL senders) are not made:
// the polling relay needs none of them.
func pollFindings(f pollFacts, o PollOptions) []Finding {
	out := pollGrantFindings(f, o)
	if !f.Grants.TableExists {
		return append(out, problem(Error, "postgres.table", "outbox-relay migrate", "table %s does not exist", o.Table))
	}
	out = append(out, pollTableFindings(f, o)...)
	if _, ok := f.Columns["seq"]; ok {
		out = append(out, pollSetupFindings(f, o)...)
	}
	out = append(out, claimsFinding(f, o), notifyFinding(f, o), advisoryLockFinding(f, o), walSlotFinding(f, o), idleTimeoutFinding(f, o))
	return out
}

// pollTableFindings: the columns the polling relay reads and writes, and
// aggregates it can order by.
func pollTableFindings(f pollFacts, o PollOptions) []Finding {
	const check = "postgres.table"
	var missing []string
	for _, c := range pollColumns {
		if _, ok := f.Columns[c]; !ok {
			missing = append(missing, c)
		}
	}
	var out []Finding
	if len(missing) > 0 {
		out = append(out, problem(Error, check, "outbox-relay migrate",
			"table %s lacks the columns %s, which polling needs (migrations 00001 and 00007)", o.Table, strings.Join(missing, ", ")))
	}
	if len(f.NullableAggregate) > 0 {
		var alter []string
		for _, c := range f.NullableAggregate {
			alter = append(alter, "ALTER COLUMN "+pgx.Identifier{c}.Sanitize()+" SET NOT NULL")
		}
		out = append(out, problem(Error, check, fmt.Sprintf("ALTER TABLE %s %s;", o.Table.Quoted(), strings.Join(alter, ", ")),
			"%s allows NULL in %s: the polling relay orders and locks rows by aggregate and refuses to start", o.Table, strings.Join(f.NullableAggregate, ", ")))
	}
	if len(out) == 0 {
		out = append(out, ok(check, "table %s has the columns polling reads and writes, aggregates NOT NULL", o.Table))
	}
	return out
}

// pollSetupFindings: what `migrate --source poll` adds: seq's default and
// the pending index.
func pollSetupFindings(f pollFacts, o PollOptions) []Finding {
	idx := migrations.Names{Table: o.Table}.PendingIndex()
	var out []Finding
	if f.State.SeqDefault {
		out = append(out, ok("postgres.poll_seq", "%s.seq takes nextval on insert: an aggregate's rows go out in insertion order", o.Table))
	} else {
		out = append(out, problem(Error, "postgres.poll_seq", migrations.PollFix,
			"%s.seq has no default: new rows have no insertion order, and the polling relay refuses to start", o.Table))
	}
	switch {
	case !f.State.Index:
		out = append(out, problem(Error, "postgres.poll_index", migrations.PollFix,
			"index %s does not exist: each batch would scan the table for an aggregate's pending rows, and the polling relay refuses to start", idx))
	case !f.State.Valid:
		out = append(out, problem(Error, "postgres.poll_index", migrations.PollFix+" (it drops and rebuilds the index)",
			"index %s is invalid (a CREATE INDEX CONCURRENTLY failed): Postgres does not use it, and the polling relay refuses to start", idx))
	default:
		out = append(out, ok("postgres.poll_index", "index %s is valid", idx))
	}
	return out
}

// claimsFinding: the table a batch writes, before it publishes, the rows
// it is publishing: without it a batch that dies after its PubAcks
// publishes them again.
func claimsFinding(f pollFacts, o PollOptions) Finding {
	const check = "postgres.poll_claims"
	name := pgx.Identifier{o.Table.Schema, poll.ClaimsTable}.Sanitize()
	if f.Claims {
		return ok(check, "table %s exists", name)
	}
	fix := "outbox-relay migrate"
	if _, ok := f.Columns["seq"]; ok {
		// Migration 00007 ran, so migrate has nothing to do: the table
		// was dropped since.
		if ddl, err := migrations.PollClaimsDDL(migrations.Names{Table: o.Table}); err == nil {
			fix = ddl
		}
	}
	return problem(Error, check, fix,
		"table %s does not exist: the polling relay records there the rows a batch is publishing, so that a batch that dies after its PubAcks is not published again; it refuses to start without it", name)
}

func notifyFinding(f pollFacts, o PollOptions) Finding {
	const check = "postgres.poll_notify"
	trigger := pgx.Identifier{migrations.Names{Table: o.Table}.NotifyTrigger()}.Sanitize()
	switch {
	case o.Notify && !f.Trigger:
		return problem(Warn, check, "outbox-relay migrate --notify",
			"no NOTIFY trigger %s on %s: the relay finds new rows only every --poll-interval", trigger, o.Table)
	case o.Notify && !f.TriggerEnabled:
		return problem(Warn, check, fmt.Sprintf("ALTER TABLE %s ENABLE TRIGGER %s;", o.Table.Quoted(), trigger),
			"the NOTIFY trigger %s on %s is disabled: the relay finds new rows only every --poll-interval", trigger, o.Table)
	case o.Notify:
		return ok(check, "the NOTIFY trigger %s wakes the relay at each insert (channel %q)", trigger, migrations.Names{Table: o.Table}.NotifyChannel())
	case f.TriggerEnabled:
		return info(check, "the NOTIFY trigger %s wakes the relay at each insert (--notify makes it required)", trigger)
	}
	return info(check, "no NOTIFY trigger: the relay finds new rows every --poll-interval; `outbox-relay migrate --notify` wakes it at each insert (at a cost to busy writers: docs/polling.md)")
}

// advisoryLockFinding: a batch takes one advisory lock per aggregate, in
// the cluster's shared lock table.
func advisoryLockFinding(f pollFacts, o PollOptions) Finding {
	const check = "postgres.poll_advisory_locks"
	if !f.AdvisoryLock {
		return problem(Error, check, fmt.Sprintf("GRANT EXECUTE ON FUNCTION pg_catalog.pg_try_advisory_xact_lock(integer, integer) TO %s;", pgx.Identifier{f.Role}.Sanitize()),
			"role %q may not call pg_try_advisory_xact_lock(integer, integer): the polling relay locks each aggregate with it, every batch fails", f.Role)
	}
	table := f.MaxLocks * f.MaxConnections
	fix := fmt.Sprintf("lower --poll-batch, or ALTER SYSTEM SET max_locks_per_transaction = %d; then restart Postgres", max(f.MaxLocks, 4*o.Batch/max(f.MaxConnections, 1)+1))
	switch {
	case table > 0 && o.Batch >= table:
		return problem(Error, check, fix,
			"a batch takes up to --poll-batch %d advisory locks, and the lock table holds about %d (max_locks_per_transaction %d × max_connections %d): Postgres answers \"out of shared memory\"",
			o.Batch, table, f.MaxLocks, f.MaxConnections)
	case table > 0 && o.Batch > table/4:
		return problem(Warn, check, fix,
			"a batch takes up to --poll-batch %d advisory locks, over a quarter of the lock table's about %d (max_locks_per_transaction %d × max_connections %d), which every session and other instances share",
			o.Batch, table, f.MaxLocks, f.MaxConnections)
	}
	return ok(check, "role %q may take advisory locks; a batch takes up to %d of the lock table's about %d", f.Role, o.Batch, table)
}

func walSlotFinding(f pollFacts, o PollOptions) Finding {
	const check = "postgres.poll_wal_slot"
	if f.WALSlot {
		return problem(Error, check,
			fmt.Sprintf("switch as docs/polling.md says: stop the WAL relay, check outbox-relay verify, UPDATE %s SET processed_at = now() WHERE processed_at IS NULL; SELECT pg_drop_replication_slot('%s'); or keep --source wal", o.Table.Quoted(), o.Slot),
			"replication slot %q exists: a WAL relay reads %s and never sets processed_at, so polling would publish again every row it published; the polling relay refuses to start", o.Slot, o.Table)
	}
	return ok(check, "no replication slot %q: no WAL relay reads the table", o.Slot)
}

// idleTimeoutFinding: a batch keeps its transaction open, idle, while it
// waits for PubAcks, also through a NATS outage.
func idleTimeoutFinding(f pollFacts, o PollOptions) Finding {
	const check = "postgres.poll_idle_timeout"
	outage := o.MaxOutage
	if outage <= 0 {
		outage = DefaultMaxOutage
	}
	switch {
	case f.IdleTimeout == 0:
		return ok(check, "idle_in_transaction_session_timeout is off: a batch may wait out a NATS outage")
	case f.IdleTimeout < outage:
		return problem(Warn, check,
			fmt.Sprintf("ALTER ROLE %s IN DATABASE %s SET idle_in_transaction_session_timeout = 0; (or above --max-outage %s)", pgx.Identifier{f.Role}.Sanitize(), pgx.Identifier{f.Database}.Sanitize(), shortDuration(outage)),
			"idle_in_transaction_session_timeout = %s for role %q, shorter than the longest NATS outage to ride out (--max-outage %s): a batch waiting for its PubAcks is cut off and its rows are read again from the stream",
			f.IdleTimeout, f.Role, shortDuration(outage))
	}
	return ok(check, "idle_in_transaction_session_timeout = %s, above --max-outage %s", f.IdleTimeout, shortDuration(outage))
}

// pollGrantFindings: the polling relay reads the table, updates its
// bookkeeping columns, writes its claims and its records.
func pollGrantFindings(f pollFacts, o PollOptions) []Finding {
	const check = "postgres.privileges"
	role := pgx.Identifier{f.Role}.Sanitize()
	fixAll := fmt.Sprintf("(or outbox-relay migrate --source poll --relay-role %s)", f.Role)
	g := f.Grants
	var out []Finding
	if !g.Connect {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT CONNECT ON DATABASE %s TO %s;", pgx.Identifier{f.Database}.Sanitize(), role),
			"role %q lacks CONNECT on database %q", f.Role, f.Database))
	}
	if !g.TableExists {
		return out
	}
	if !g.SchemaUsage {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s;", pgx.Identifier{o.Table.Schema}.Sanitize(), role),
			"role %q lacks USAGE on schema %q", f.Role, o.Table.Schema))
	}
	if !g.TableSelect {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT SELECT ON %s TO %s; %s", o.Table.Quoted(), role, fixAll),
			"role %q cannot SELECT from %s: the polling relay reads its pending rows", f.Role, o.Table))
	}
	if len(f.NoUpdate) > 0 {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT UPDATE (%s) ON %s TO %s; %s", strings.Join(pollUpdated, ", "), o.Table.Quoted(), role, fixAll),
			"role %q cannot UPDATE %s of %s: the polling relay marks rows processed and counts failed attempts there", f.Role, strings.Join(f.NoUpdate, ", "), o.Table))
	}
	claims := pgx.Identifier{o.Table.Schema, poll.ClaimsTable}.Sanitize()
	if f.Claims && !f.ClaimsGranted {
		out = append(out, problem(Error, check, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s; %s", claims, role, fixAll),
			"role %q lacks SELECT, INSERT, UPDATE, DELETE on %s, where a batch claims the rows it publishes", f.Role, claims))
	}
	for _, r := range g.Relay {
		switch {
		case !r.Exists:
			out = append(out, problem(Error, check, "outbox-relay migrate", "the relay's table %s does not exist", r.Table))
		case !r.Granted:
			out = append(out, problem(Error, check, fmt.Sprintf("GRANT %s ON %s TO %s; %s", r.Privileges, r.Table, role, fixAll),
				"role %q lacks %s on %s, where the relay keeps its records", f.Role, r.Privileges, r.Table))
		}
	}
	if len(out) == 0 {
		out = append(out, ok(check, "role %q may read %s, update its bookkeeping columns, and write the claims and the relay's records", f.Role, o.Table))
	}
	return out
}

// pollDuplicateWindowFinding: rows a killed batch had claimed are taken
// again by the next batch (another instance within --poll-interval),
// which reads the stream and publishes only what it lacks; a message of
// the killed batch still on its way (up to --ack-timeout) can land after
// that read, and JetStream drops the copy only within its window.
func pollDuplicateWindowFinding(f natsFacts, o NATSOptions) Finding {
	const check = "nats.poll_duplicate_window"
	need := o.Poll.Interval + o.Poll.AckTimeout
	window, fix := createdWindow(o), fmt.Sprintf("run the relay with --duplicate-window %s (it creates the stream with it)", shortDuration(roundUpSecond(need)))
	if f.StreamExists {
		window, fix = f.Stream.Duplicates, fmt.Sprintf("nats stream edit %s --dupe-window %s", o.Stream.Name, shortDuration(roundUpSecond(need)))
	}
	if window < need {
		return problem(Warn, check, fix,
			"duplicate window %s is shorter than --poll-interval %s + --ack-timeout %s: after a relay dies mid-batch, another instance takes its rows within the poll interval and reads the stream first, but a message of the dead batch still on its way can land after that read, and is then stored twice",
			window, o.Poll.Interval, o.Poll.AckTimeout)
	}
	return ok(check, "duplicate window %s covers --poll-interval %s + --ack-timeout %s", window, o.Poll.Interval, o.Poll.AckTimeout)
}

func roundUpSecond(d time.Duration) time.Duration { return (d + time.Second - 1).Truncate(time.Second) }
