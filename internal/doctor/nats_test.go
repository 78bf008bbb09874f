package doctor

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// TestReadSync: a system-account user reads the servers' fsync policy
// (sync_interval: always here); another user cannot, and is told so.
func TestReadSync(t *testing.T) {
	sys, app := server.NewAccount("SYS"), server.NewAccount("APP")
	srv, err := devenv.ServeNATS(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), SyncAlways: true, NoLog: true, NoSigs: true,
		Accounts: []*server.Account{sys, app}, SystemAccount: "SYS",
		Users: []*server.User{{Username: "admin", Password: "a", Account: sys}, {Username: "app", Password: "b", Account: app}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		user, password string
		visible        bool
	}{{"admin", "a", true}, {"app", "b", false}} {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(tc.user, tc.password))
		if err != nil {
			t.Fatal(err)
		}
		got := readSync(ctx, nc)
		nc.Close()
		switch {
		case tc.visible && (got == nil || !got.Always):
			t.Errorf("%s: sync policy %+v, want sync always", tc.user, got)
		case !tc.visible && got != nil:
			t.Errorf("%s: sync policy %+v visible to a user outside the system account", tc.user, got)
		}
	}
}
