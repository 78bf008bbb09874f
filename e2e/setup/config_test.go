package setup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// retried is the exit a startCase expects of a transient outage: none.
// The relay waits, says so, and streams once the outage ends.
const retried = -1

// startCase is one way a start can go wrong: what is set up, and how the
// relay must react. A configuration error ends the process with a
// non-zero exit and a message with its fix; an outage is retried.
type startCase struct {
	name string
	// pg, when set, are the settings of a Postgres cluster of the case's
	// own (the shared one cannot have them).
	pg map[string]string
	// setup breaks the Env and returns the relay's extra flags, and, for
	// an outage, what ends it.
	setup func(t *testing.T, env *relaytest.Env) (flags []string, recover func())
	// exit is the expected exit code, or retried.
	exit int
	// want are fragments of the relay's log: the error and its fix (the
	// retry message for an outage). The log is JSON: quotes are \".
	want []string
}

// TestErrorsAtStart: every error a start can meet, on real servers. Each
// configuration error ends the process with a non-zero exit and says how
// to fix it; each outage (a server down, silent, without a JetStream
// leader) is retried, and the relay streams once it ends.
func TestErrorsAtStart(t *testing.T) {
	var cases []startCase
	cases = append(cases, postgresCases()...)
	cases = append(cases, natsCases()...)
	cases = append(cases, streamCases()...)
	cases = append(cases, outageCases()...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, tc.pg)
			flags, recover := tc.setup(t, env)
			relay := suite.StartRelay(t, env, flags...)
			if tc.exit == retried {
				for _, w := range tc.want {
					relay.WaitLog(w, relaytest.FaultWait)
				}
				if relay.Exited() {
					t.Fatalf("the relay exited during an outage:\n%s", relay.Logs())
				}
				recover()
				relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
				env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
				env.WaitStored(1, relaytest.FaultWait)
				return
			}
			if code := relay.Wait(relaytest.FaultWait); code != tc.exit {
				t.Errorf("exit code %d, want %d", code, tc.exit)
			}
			for _, w := range tc.want {
				if !strings.Contains(relay.Logs(), w) {
					t.Errorf("log lacks %q:\n%s", w, relay.Logs())
				}
			}
		})
	}
}

// newEnv is the case's Env: in the shared cluster, or in a cluster of its
// own with settings.
func newEnv(t *testing.T, settings map[string]string) *relaytest.Env {
	if settings == nil {
		return suite.NewEnv(t)
	}
	return relaytest.NewEnv(t, relaytest.PrivateCluster(t, settings))
}

func postgresCases() []startCase {
	return []startCase{
		{name: "postgres role does not exist", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				return []string{"--pg-url", strings.Replace(env.PGURL, "postgres://postgres@", "postgres://nosuchrole@", 1)}, nil
			}, want: []string{`role \"nosuchrole\" does not exist`, "check the user"}},
		{name: "postgres role may not log in", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.Exec(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'nologin') THEN CREATE ROLE nologin NOLOGIN; END IF; END $$`)
				return []string{"--pg-url", strings.Replace(env.PGURL, "postgres://postgres@", "postgres://nologin@", 1)}, nil
			}, want: []string{`role \"nologin\" is not permitted to log in`, "check the user"}},
		{name: "database does not exist", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				return []string{"--pg-url", strings.Replace(env.PGURL, "/"+env.Database+"?", "/nosuchdb?", 1)}, nil
			}, want: []string{`database \"nosuchdb\" does not exist`, "check the database name"}},
		{name: "postgres refuses TLS that sslmode requires", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				return []string{"--pg-url", strings.Replace(env.PGURL, "sslmode=disable", "sslmode=require", 1)}, nil
			}, want: []string{"does not offer TLS", "ssl = on"}},
		{name: "role without REPLICATION", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.Exec(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'norepl') THEN CREATE ROLE norepl LOGIN; END IF; END $$`)
				env.Exec(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO norepl`)
				return []string{"--pg-url", strings.Replace(env.PGURL, "postgres://postgres@", "postgres://norepl@", 1)}, nil
			}, want: []string{`role \"norepl\" lacks the REPLICATION attribute`, `ALTER ROLE \"norepl\" REPLICATION`}},
		{name: "role may not read the table", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.Exec(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'noselect') THEN CREATE ROLE noselect LOGIN REPLICATION; END IF; END $$`)
				return []string{"--pg-url", strings.Replace(env.PGURL, "postgres://postgres@", "postgres://noselect@", 1)}, nil
			}, want: []string{"permission denied", "GRANT"}},
		{name: "table missing", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				return []string{"--table", "public.no_such_table"}, nil
			}, want: []string{"does not exist", "outbox-relay migrate"}},
		{name: "publication missing", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.Exec(`DROP PUBLICATION outbox_pub`)
				return nil, nil
			}, want: []string{`publication \"outbox_pub\" does not exist`, "CREATE PUBLICATION"}},
		{name: "table not in the publication", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.Exec(`ALTER PUBLICATION outbox_pub DROP TABLE outbox_events`)
				return nil, nil
			}, want: []string{"is not in publication", "ALTER PUBLICATION outbox_pub ADD TABLE"}},
		{name: "invalid slot name", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				return []string{"--slot", "Bad-Slot"}, nil
			}, want: []string{"--slot", "lower-case letters"}},
		{name: "slot of another plugin", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.Exec(`SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, env.Slot)
				return nil, nil
			}, want: []string{"test_decoding", "pg_drop_replication_slot"}},
		{name: "physical slot of that name", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.Exec(`SELECT pg_create_physical_replication_slot($1)`, env.Slot)
				return nil, nil
			}, want: []string{"is a physical slot", "use another slot name"}},
		{name: "wal_level is not logical", exit: 1, pg: map[string]string{"wal_level": "replica"},
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) { return nil, nil },
			want:  []string{"wal_level", "ALTER SYSTEM SET wal_level = logical"}},
		{name: "every replication slot in use", exit: 1, pg: map[string]string{"max_replication_slots": "1"},
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, env.Slot+"_other")
				return nil, nil
			}, want: []string{"all replication slots are in use", "max_replication_slots"}},
	}
}

func natsCases() []startCase {
	return []startCase{
		{name: "nats user unknown", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.RelayNATS = serveNATSConf(t, natsAccounts)
				return nil, nil
			}, want: []string{"authentication failed", "--nats-creds"}},
		{name: "nats credentials file missing", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				return []string{"--nats-creds", "/nonexistent/relay.creds"}, nil
			}, want: []string{"/nonexistent/relay.creds"}},
		{name: "nats certificate not trusted", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.RelayNATS = strings.Replace(serveNATS(t, &server.Options{JetStream: true, TLSConfig: serverTLS(t), TLS: true}), "nats://", "tls://", 1)
				return nil, nil
			}, want: []string{"not trusted", "--nats-ca"}},
		{name: "nats server without JetStream", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.RelayNATS = serveNATS(t, &server.Options{})
				return nil, nil
			}, want: []string{"JetStream", "-js"}},
		{name: "nats account without JetStream", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.RelayNATS = userURL(serveNATSConf(t, natsAccounts), "nojs")
				return nil, nil
			}, want: []string{"not enabled for account", "jetstream"}},
		{name: "nats user may not create the stream", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.RelayNATS = userURL(serveNATSConf(t, natsAccounts), "denied")
				return nil, nil
			}, want: []string{"ermissions", "$JS.API.STREAM.CREATE"}},
		{name: "nats account at its stream limit", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				url := userURL(serveNATSConf(t, natsAccounts), "few")
				createStream(t, url, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}})
				env.RelayNATS = url
				return nil, nil
			}, want: []string{"maximum number of streams", "nats stream"}},
		{name: "nats account requires max bytes", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.RelayNATS = userURL(serveNATSConf(t, natsAccounts), "sized")
				return nil, nil
			}, want: []string{"max bytes", "--stream-max-bytes"}},
	}
}

func streamCases() []startCase {
	existing := func(cfg jetstream.StreamConfig) func(t *testing.T, env *relaytest.Env) ([]string, func()) {
		return func(t *testing.T, env *relaytest.Env) ([]string, func()) {
			createStream(t, env.NATSURL, cfg)
			return nil, nil
		}
	}
	relaySubjects := []string{"outbox.*.*", contract.DefaultDeadLetterSubject}
	return []startCase{
		{name: "invalid stream name", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				return []string{"--stream", "bad.name"}, nil
			},
			want: []string{`stream name \"bad.name\"`, "--stream"}},
		{name: "stream subjects overlap another stream", exit: 1,
			setup: existing(jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"outbox.>"}}),
			want:  []string{"overlap", "--stream OTHER"}},
		{name: "replicas on a single server", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				return []string{"--stream-replicas", "3"}, nil
			},
			want: []string{"replicas", "--stream-replicas 1"}},
		{name: "stream subjects do not cover the template", exit: 1,
			setup: existing(jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"orders.>"}}),
			want:  []string{"do not cover", "nats stream edit OUTBOX"}},
		{name: "stream with work-queue retention", exit: 1,
			setup: existing(jetstream.StreamConfig{Name: "OUTBOX", Subjects: relaySubjects, Retention: jetstream.WorkQueuePolicy}),
			want:  []string{"work-queue retention", "--retention limits"}},
		{name: "stream with interest retention", exit: 1,
			setup: existing(jetstream.StreamConfig{Name: "OUTBOX", Subjects: relaySubjects, Retention: jetstream.InterestPolicy}),
			want:  []string{"interest retention", "--retention limits"}},
		{name: "stream is a mirror", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				createStream(t, env.NATSURL, jetstream.StreamConfig{Name: "ORIGIN", Subjects: []string{"origin.>"}})
				createStream(t, env.NATSURL, jetstream.StreamConfig{Name: "OUTBOX", Mirror: &jetstream.StreamSource{Name: "ORIGIN"}})
				return nil, nil
			}, want: []string{"mirror", "--stream"}},
		{name: "stream is sealed", exit: 1,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				cfg := jetstream.StreamConfig{Name: "OUTBOX", Subjects: relaySubjects}
				createStream(t, env.NATSURL, cfg)
				cfg.Sealed = true
				updateStream(t, env.NATSURL, cfg)
				return nil, nil
			}, want: []string{"sealed", "--stream"}},
		{name: "stream does not acknowledge", exit: 1,
			setup: existing(jetstream.StreamConfig{Name: "OUTBOX", Subjects: relaySubjects, NoAck: true}),
			want:  []string{"no-ack", "--no-ack=false"}},
	}
}

func outageCases() []startCase {
	return []startCase{
		{name: "nats down", exit: retried,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				env.NATS.Stop()
				return nil, func() {
					if err := env.NATS.Start(); err != nil {
						t.Fatal(err)
					}
				}
			}, want: []string{"cannot connect to NATS; retrying", "connection refused"}},
		{name: "nats silent", exit: retried,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				proxy := relaytest.StartProxy(t, strings.TrimPrefix(env.NATSURL, "nats://"))
				proxy.Blackhole()
				env.RelayNATS = "nats://" + proxy.Addr()
				return nil, proxy.Restore
			}, want: []string{"cannot connect to NATS; retrying", "timeout"}},
		{name: "postgres down", exit: retried,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				proxy := relaytest.StartProxy(t, env.PGAddr())
				proxy.Cut()
				env.RelayPG = env.PGURLVia(proxy.Addr())
				return nil, proxy.Restore
			}, want: []string{"Postgres is not reachable yet; retrying"}},
		{name: "JetStream cluster without a leader", exit: retried,
			setup: func(t *testing.T, env *relaytest.Env) ([]string, func()) {
				cluster := relaytest.StartNATSCluster(t, 3)
				env.UseNATS(cluster.URLs())
				cluster.Kill(1)
				cluster.Kill(2)
				return nil, func() {
					cluster.Start(1)
					cluster.Start(2)
				}
			}, want: []string{"JetStream not available yet; retrying"}},
	}
}

// createStream creates a stream as the user of url.
func createStream(t *testing.T, url string, cfg jetstream.StreamConfig) {
	t.Helper()
	js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
}

// updateStream changes a stream as the user of url.
func updateStream(t *testing.T, url string, cfg jetstream.StreamConfig) {
	t.Helper()
	js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("update stream %s: %v", cfg.Name, err)
	}
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
