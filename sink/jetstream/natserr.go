package jetstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// NATSCause names, for people, why connecting to NATS failed: the
// authentication, TLS, DNS, a refused connection or a timeout; "" when it
// cannot tell. nats.go reports some of these only as "no servers
// available": see ExplainNATSConnect.
func NATSCause(err error) string {
	var (
		dns       *net.DNSError
		verify    *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
		netErr    net.Error
		path      *fs.PathError
	)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		return "authentication failed: check the user and password in --nats-url, --nats-creds or --nats-nkey"
	case errors.Is(err, nats.ErrNkeysNotSupported):
		return "authentication failed: the credentials do not suit this server"
	case errors.As(err, &dns):
		return fmt.Sprintf("DNS lookup of %q failed: check the host name in --nats-url", dns.Name)
	case errors.As(err, &verify), errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return "TLS: the server's certificate is not trusted: check --nats-ca and the host name in --nats-url"
	case errors.Is(err, nats.ErrSecureConnRequired):
		return "TLS: the server requires TLS: use tls:// in --nats-url and --nats-ca"
	case errors.Is(err, nats.ErrSecureConnWanted):
		return "TLS: the server does not offer TLS: use nats:// in --nats-url, or enable TLS on the server"
	case errors.As(err, &record), errors.Is(err, nats.ErrClientCertOrRootCAsRequired):
		return "TLS: handshake failed: check --nats-ca, --nats-cert and --nats-key"
	case errors.As(err, &path):
		return fmt.Sprintf("cannot read %s: check --nats-creds, --nats-nkey, --nats-ca, --nats-cert and --nats-key", path.Path)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: nothing listens at that address (is nats-server running, is the port right?)"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timed out: the server does not answer (firewall, wrong address, or overloaded)"
	}
	return ""
}

// ConnectConfigError reports whether connecting failed for a reason that
// waiting cannot fix: the credentials (a user, password, NKey or JWT the
// server refuses, or a credentials file that cannot be read), or TLS (a
// certificate not trusted, TLS required by one side and not offered by
// the other). A refused connection, a DNS failure or a timeout is an
// outage.
func ConnectConfigError(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
		path      *fs.PathError
	)
	switch {
	case err == nil:
		return false
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired), errors.Is(err, nats.ErrNkeysNotSupported):
		return true
	case errors.As(err, &verify), errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid),
		errors.As(err, &record), errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted),
		errors.Is(err, nats.ErrClientCertOrRootCAsRequired):
		return true
	case errors.As(err, &path):
		// A credentials, key or certificate file (dialling never opens one).
		return true
	}
	return false
}

// ExplainNATSConnect wraps err, from connecting to the comma-separated
// urls, with its cause. nats.go turns a refused connection into "no
// servers available"; then each server is dialled once to find out why.
func ExplainNATSConnect(ctx context.Context, err error, urls string) error {
	where := RedactNATS(urls)
	cause := NATSCause(err)
	if cause == "" && errors.Is(err, nats.ErrNoServers) {
		cause = probeNATS(ctx, urls)
	}
	if cause == "" {
		return fmt.Errorf("connect to NATS at %s: %w", where, err)
	}
	return fmt.Errorf("connect to NATS at %s: %s: %w", where, cause, err)
}

// probeNATS dials each server and returns the first cause it can name.
func probeNATS(ctx context.Context, urls string) string {
	for _, raw := range strings.Split(urls, ",") {
		raw = strings.TrimSpace(raw)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "4222")
		}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", host)
		cancel()
		if err == nil {
			conn.Close()
			continue
		}
		if cause := NATSCause(err); cause != "" {
			return cause
		}
	}
	return ""
}
