package setup

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// The NATS servers the configuration cases need beyond an Env's own:
// accounts and users, TLS, no JetStream. Each is embedded, on a free
// loopback port, and stops when the test ends.

// natsAccounts is a server's accounts: a user per way of being set up
// wrong, each named after its account.
const natsAccounts = `
accounts {
  JS: { jetstream: enabled, users: [{user: js, password: js}] }
  NOJS: { users: [{user: nojs, password: nojs}] }
  FEW: { jetstream: { max_streams: 1 }, users: [{user: few, password: few}] }
  SIZED: { jetstream: { max_bytes_required: true, max_file: 1GB }, users: [{user: sized, password: sized}] }
  DENIED: {
    jetstream: enabled
    users: [{user: denied, password: denied, permissions: { publish: { deny: "$JS.API.STREAM.CREATE.>" } }}]
  }
}
`

// serveNATSConf starts a server from a configuration file's body (its
// listen address and store are added) and returns its client URL
// without credentials.
func serveNATSConf(t *testing.T, body string) string {
	t.Helper()
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "nats.conf")
	text := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream { store_dir: %q }\n%s", port, t.TempDir(), body)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats config: %v\n%s", err, text)
	}
	opts.NoLog, opts.NoSigs = true, true
	return serve(t, opts)
}

// serveNATS starts a server with opts on a free loopback port.
func serveNATS(t *testing.T, opts *server.Options) string {
	t.Helper()
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port = "127.0.0.1", port
	opts.NoLog, opts.NoSigs = true, true
	if opts.JetStream {
		opts.StoreDir = t.TempDir()
	}
	return serve(t, opts)
}

func serve(t *testing.T, opts *server.Options) string {
	t.Helper()
	srv, err := devenv.ServeNATS(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return fmt.Sprintf("nats://127.0.0.1:%d", opts.Port)
}

// userURL puts user:password into a client URL.
func userURL(url, user string) string {
	return "nats://" + user + ":" + user + "@" + url[len("nats://"):]
}

// serverTLS is a TLS configuration for 127.0.0.1 with a certificate of a
// CA made for the test, which no client trusts.
func serverTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "outbox-relay test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}
