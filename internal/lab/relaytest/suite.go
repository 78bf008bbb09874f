package relaytest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Suite is what the tests of one package that runs the relay binary
// share: the Postgres they create their databases in, the relay program,
// and the program that serves NATS in a child process (the test binary
// re-executed: its TestMain calls ServeNATSIfAsked first).
type Suite struct {
	Server Server
	Relay  Binary
	NATS   Binary
}

// NewEnv is a test's own database and NATS server.
func (s *Suite) NewEnv(t testing.TB) *Env { return NewEnv(t, s.Server) }

// StartRelay runs `outbox-relay run` against env with extra flags.
func (s *Suite) StartRelay(t testing.TB, env *Env, extra ...string) *Relay {
	args := append([]string{"run"}, env.RelayArgs()...)
	return StartRelay(t, s.Relay, append(args, extra...)...)
}

// RunWithBuiltRelay is the whole TestMain of a package that tests the
// relay binary from outside (e2e/...). First ServeNATSIfAsked: in a child
// this test binary re-executed to serve NATS it does not return. Then it
// builds the relay (BuildRelay) into s.Relay, serves NATS from this test
// binary (s.NATS), opens the Postgres (OpenServer) into s.Server, runs the
// tests, removes what it made and exits with their code. When the build
// fails the package fails, saying why: its tests never skip.
func RunWithBuiltRelay(m *testing.M, s *Suite) {
	ServeNATSIfAsked()
	bin, remove, err := BuildRelay()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	s.Relay = bin
	s.NATS = Binary{Path: os.Args[0]}
	code := runWithServer(m, &s.Server)
	remove()
	os.Exit(code)
}

// BuildRelay builds the relay, `go build ./cmd/outbox-relay` in the module
// root (with -race when this test binary has it, without VCS stamping),
// into a temporary directory that remove deletes.
func BuildRelay() (bin Binary, remove func(), err error) {
	root, err := moduleRoot()
	if err != nil {
		return Binary{}, nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-relay-bin-")
	if err != nil {
		return Binary{}, nil, err
	}
	exe := filepath.Join(dir, "outbox-relay")
	args := []string{"build", "-buildvcs=false", "-o", exe}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/outbox-relay")
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return Binary{}, nil, fmt.Errorf("build the relay (go %s in %s): %v\n%s", strings.Join(args, " "), root, err, out)
	}
	return Binary{Path: exe}, func() { _ = os.RemoveAll(dir) }, nil
}

// moduleRoot is the directory of the go.mod of the package under test.
func moduleRoot() (string, error) {
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("go env GOMOD: not in a module")
	}
	return filepath.Dir(mod), nil
}

// goTool is the go command: the one on PATH, or the one of the toolchain
// that built this binary.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// RunCLI runs one outbox-relay command to completion and returns its
// output (stdout and stderr together).
func (b Binary) RunCLI(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(b.Path, args...)
	cmd.Env = append(cmd.Environ(), b.Env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// RunSplit runs one outbox-relay command and returns its stdout, its
// stderr and its exit code.
func (b Binary) RunSplit(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(b.Path, args...)
	cmd.Env = append(cmd.Environ(), b.Env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return o.String(), e.String(), code
}
