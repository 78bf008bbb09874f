// Package replication reads an outbox table's inserts from a Postgres
// logical replication slot (pgoutput, protocol version 1, streaming off).
//
// One goroutine owns the replication connection: it receives WAL, hands
// decoded events to a Handler in commit order, answers keepalives at once
// (also while the Handler has no room) and sends standby status updates
// whose flush position is exactly what the Handler says is safe. It never
// confirms what was merely received. Lost connections are reopened with
// capped exponential backoff, streaming again from the slot's own position.
//
// Prerequisites: wal_level = logical, a role with REPLICATION (or
// superuser), a publication that contains the outbox table with
// publish = 'insert'. Check verifies them and says how to fix each one.
package replication

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Session settings for every connection the relay opens. The replication
// connection's output functions format row values with them, so the
// decoder sees timestamps in ISO form and UTC, and bytea in hex.
var sessionParams = map[string]string{
	"application_name":   "outbox-relay",
	"DateStyle":          "ISO, MDY",
	"TimeZone":           "UTC",
	"IntervalStyle":      "postgres",
	"bytea_output":       "hex",
	"extra_float_digits": "3",
}

// ErrNoConnString is the error of every command, and of the relay's and
// the polling relay's configuration, when no Postgres connection string
// is given: one message, with the fix.
var ErrNoConnString = errors.New("no Postgres connection string: set --pg-url or OUTBOX_PG_URL, or --pg-url-file with a file holding it (for example postgres://relay@db:5432/app)")

// ParseConnString parses an ordinary Postgres connection string (URL or
// key=value) and returns the configuration for a pool of regular
// connections and, derived from it, for the replication connection.
func ParseConnString(s string) (regular *pgxpool.Config, repl *pgconn.Config, err error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil, ErrNoConnString
	}
	regular, err = parsePool("--pg-url", s)
	if err != nil {
		return nil, nil, err
	}
	repl, err = pgconn.ParseConfig(s)
	if err != nil {
		return nil, nil, fmt.Errorf("parse --pg-url %s: %w", Redact(s), redactErr(err, s))
	}
	setSessionParams(repl)
	repl.RuntimeParams["replication"] = "database"
	// WAL arrives as a stream of small messages: read it in large chunks.
	repl.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(bufio.NewReaderSize(r, 256<<10), w)
	}
	return regular, repl, nil
}

// ParsePrimaryConnString parses --primary-url: the primary where a relay
// reading from a standby keeps its record (no replication connection).
func ParsePrimaryConnString(s string) (*pgxpool.Config, error) {
	return parsePool("--primary-url", s)
}

func parsePool(flag, s string) (*pgxpool.Config, error) {
	regular, err := pgxpool.ParseConfig(s)
	if err != nil {
		return nil, fmt.Errorf("parse %s %s: %w", flag, Redact(s), redactErr(err, s))
	}
	regular.MaxConns = 4
	setSessionParams(&regular.ConnConfig.Config)
	return regular, nil
}

func setSessionParams(c *pgconn.Config) {
	for k, v := range sessionParams {
		if k == "application_name" && c.RuntimeParams[k] != "" {
			continue // the user named the connection
		}
		c.RuntimeParams[k] = v
	}
}

// Describe names a connection for logs and errors: user, host, port and
// database, never the password.
func Describe(c *pgconn.Config) string {
	return fmt.Sprintf("postgres://%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

var (
	urlPassword = regexp.MustCompile(`(?i)(://[^:/@\s]*:)[^@\s]*@`)
	kvPassword  = regexp.MustCompile(`(?i)((?:^|\s)(?:password|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)
	paramSecret = regexp.MustCompile(`(?i)([?&](?:password|sslpassword)=)[^&\s]*`)
)

// Redact hides passwords in a connection string or in a message quoting one.
func Redact(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}REDACTED@")
	s = kvPassword.ReplaceAllString(s, "${1}REDACTED")
	return paramSecret.ReplaceAllString(s, "${1}REDACTED")
}

// redactErr keeps pgx's parse errors from echoing the password back.
func redactErr(err error, conn string) error {
	msg := err.Error()
	if u, perr := url.Parse(conn); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "REDACTED")
		}
	}
	return fmt.Errorf("%s", Redact(msg))
}
