package messages

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestHostileValues: values from rows never change a subject's shape:
// dots, wildcards, whitespace, empty strings, 5,000 characters, a $JS API
// subject all give a valid subject under the prefix, the exact value in
// the headers (percent-encoded where a header would alter it), and no
// dropped connection. Rows that cannot be published (NULL id or payload)
// go to the dead-letter subject and do not block the rest.
func TestHostileValues(t *testing.T) {
	env := suite.NewEnv(t)
	env.Exec(`DROP VIEW outbox_dead_letters`)
	env.Exec(`ALTER TABLE outbox_events ALTER COLUMN aggregate_type TYPE TEXT, ALTER COLUMN aggregate_id TYPE TEXT,
		ALTER COLUMN event_type TYPE TEXT, ALTER COLUMN payload DROP NOT NULL`)
	relay := suite.StartRelay(t, env)
	relay.WaitLog("streaming from the slot", 30*time.Second)

	values := []string{"a.b", "*", ">", "a b", " ", "\t", "", strings.Repeat("x", 5000), "$JS.API.STREAM.DELETE.OUTBOX",
		"_INBOX.x", "é", "line\r\nNats-Msg-Id: forged", "100%", "a..b", " padded "}
	ids := map[string]string{}
	for _, v := range values {
		id := env.Tx(relaytest.NewRow(v, v, v, `{"v": 1}`))[0]
		ids[id] = v
	}
	// A NULL payload can never be published: it goes to the dead-letter
	// subject, and the event after it still flows.
	env.Exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'broken', NULL)`)
	after := env.Tx(relaytest.NewRow("order", "1", "after.broken", `{}`))[0]

	env.WaitStored(len(values)+2, 30*time.Second)
	env.Check()
	stored := relaytest.StoredByID(t, env)
	token := regexp.MustCompile(`^[A-Za-z0-9_%~-]+$`)
	for id, v := range ids {
		m, ok := stored[id]
		if !ok {
			t.Errorf("value %q: not stored", v)
			continue
		}
		parts := strings.Split(m.Subject, ".")
		if len(parts) != 3 || parts[0] != "outbox" || !token.MatchString(parts[1]) || !token.MatchString(parts[2]) || len(m.Subject) > 200 {
			t.Errorf("value %q: subject %q is not outbox.<token>.<token>", v, m.Subject)
		}
		got := m.Header.Get(contract.HeaderEventType)
		if strings.Contains(m.Header.Get(contract.HeaderPercentEncoded), contract.HeaderEventType) {
			got = percentDecode(t, got)
		}
		if got != v {
			t.Errorf("value %q: Outbox-Event-Type header carries %q", v, got)
		}
		if m.Header.Get(contract.HeaderMsgID) != id {
			t.Errorf("value %q: Nats-Msg-Id = %q, want %q", v, m.Header.Get(contract.HeaderMsgID), id)
		}
	}
	if _, ok := stored[after]; !ok {
		t.Error("the event after the dead letter was not published")
	}
	var deadLetters int
	for _, m := range stored {
		if m.Subject == env.DeadSubj {
			deadLetters++
			if !strings.Contains(m.Header.Get(contract.HeaderDeadLetterReason), "payload is NULL") {
				t.Errorf("dead letter reason = %q", m.Header.Get(contract.HeaderDeadLetterReason))
			}
		}
	}
	if deadLetters != 1 {
		t.Errorf("%d dead letters, want 1", deadLetters)
	}
	if strings.Contains(relay.Logs(), "disconnected from NATS") {
		t.Error("a hostile value made NATS drop the connection")
	}
}

func percentDecode(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s)+0 && i+2 <= len(s)-1 {
			var c byte
			for _, h := range s[i+1 : i+3] {
				c <<= 4
				switch {
				case h >= '0' && h <= '9':
					c |= byte(h - '0')
				case h >= 'A' && h <= 'F':
					c |= byte(h - 'A' + 10)
				default:
					t.Fatalf("bad escape in %q", s)
				}
			}
			b.WriteByte(c)
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
