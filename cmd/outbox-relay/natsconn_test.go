package main

import (
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestNATSFailureCauses: a NATS connection that fails says why, in the one-shot
// commands (doctor, status: exit 2) and in the relay: wrong credentials name
// the authentication, and the relay stops on them (waiting cannot fix them:
// jetstream.WaitConnected), an unknown host names DNS, a closed port names
// the refused connection, and on those the relay keeps retrying.
func TestNATSFailureCauses(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	authURL := startBareNATS(t, func(o *natsserver.Options) { o.Username, o.Password = "relay", "right-password" })
	wrongCreds := strings.Replace(authURL, "nats://", "nats://relay:wrong-password@", 1)
	cases := []struct {
		name, url, want string
		fatal           bool // the relay stops, exit 1; otherwise it retries
	}{
		{"wrong credentials", wrongCreds, "authentication failed", true},
		{"unresolvable host", "nats://no-such-host.invalid:4222", `DNS lookup of`, false},
		{"nothing listening", "nats://127.0.0.1:1", "connection refused", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range []string{"doctor", "status"} {
				out, errOut, code := suite.Relay.RunSplit(t, append(append([]string{cmd}, env.ToolArgs()...), "--nats-url", tc.url)...)
				if code != 2 || !strings.Contains(out+errOut, tc.want) {
					t.Errorf("%s: exit %d, want 2 and %q:\n%s\n%s", cmd, code, tc.want, out, errOut)
				}
				if strings.Contains(out+errOut, "wrong-password") {
					t.Errorf("%s prints the NATS password:\n%s\n%s", cmd, out, errOut)
				}
			}
			env.RelayNATS = tc.url
			relay := suite.StartRelay(t, env)
			relay.WaitLog(tc.want, 30*time.Second)
			if tc.fatal {
				if code := relay.Wait(30 * time.Second); code != 1 || relay.CountLog("cannot continue") != 1 {
					t.Errorf("relay exited %d, want 1 with its cause said once:\n%s", code, relay.Logs())
				}
			} else {
				time.Sleep(time.Second) // still retrying, several attempts later
				relaytest.StopRelay(t, relay)
			}
			if strings.Contains(relay.Logs(), "wrong-password") {
				t.Errorf("the relay logs the NATS password:\n%s", relay.Logs())
			}
		})
	}
}

// TestFatalErrorSaidOnce: a fatal error and its fix appear once in the
// relay's output.
func TestFatalErrorSaidOnce(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	env.Exec(`DROP PUBLICATION outbox_pub`)
	relay := suite.StartRelay(t, env)
	if code := relay.Wait(30 * time.Second); code == 0 {
		t.Fatal("relay exited 0 without its publication")
	}
	if n := relay.CountLog("CREATE PUBLICATION"); n != 1 {
		t.Errorf("the fix appears %d times, want once:\n%s", n, relay.Logs())
	}
}
