package core

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/contract"
)

// connectConfigError returns, as a contract.FatalError with its fix, an
// error of connecting to Postgres that waiting cannot fix: the role or
// its password, the database, TLS that the connection string requires
// and the server does not offer, a certificate not trusted. It returns
// nil for an outage (refused, unreachable, starting up, too many
// connections), which is waited out.
func connectConfigError(ctx context.Context, cfg *pgconn.Config, where string, err error) error {
	var (
		pe        *pgconn.PgError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
	)
	wrapped := fmt.Errorf("connect to %s: %w", where, err)
	switch {
	case errors.As(err, &pe) && (pe.Code == "28P01" || pe.Code == "28000"):
		return &contract.FatalError{Err: wrapped, Hint: "check the user and password in --pg-url (or --pg-url-file), that the role may log in (ALTER ROLE … LOGIN), and pg_hba.conf"}
	case errors.As(err, &pe) && pe.Code == "3D000":
		return &contract.FatalError{Err: wrapped, Hint: "check the database name in --pg-url: `outbox-relay migrate` creates the relay's tables, not the database"}
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return &contract.FatalError{Err: wrapped, Hint: "the server's certificate is not trusted: check sslrootcert and the host name in --pg-url"}
	case requiresTLS(cfg) && !errors.As(err, &pe) && tlsRefused(ctx, cfg):
		return &contract.FatalError{Err: wrapped,
			Hint: "the server does not offer TLS, which the connection string's sslmode (require, verify-ca or verify-full) asks for: turn it on (ssl = on in postgresql.conf, with a certificate), or use sslmode=disable on a network you trust"}
	}
	return nil
}

// requiresTLS reports whether cfg connects only with TLS (sslmode
// require, verify-ca or verify-full): no attempt, fallbacks included,
// goes without.
func requiresTLS(cfg *pgconn.Config) bool {
	if cfg.TLSConfig == nil {
		return false
	}
	for _, fb := range cfg.Fallbacks {
		if fb.TLSConfig == nil {
			return false
		}
	}
	return true
}

// tlsRefused asks the server whether it speaks TLS (an SSLRequest) and
// reports whether it said no; pgconn reports the refusal only in words.
func tlsRefused(ctx context.Context, cfg *pgconn.Config) bool {
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		return false
	}
	defer conn.Close()
	if deadline, ok := dctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	var req [8]byte
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint32(req[4:8], 80877103) // the SSLRequest code
	if _, err := conn.Write(req[:]); err != nil {
		return false
	}
	var answer [1]byte
	if _, err := conn.Read(answer[:]); err != nil {
		return false
	}
	return answer[0] == 'N'
}
