package devenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// orphanEnv makes the test binary a process that starts a cluster, prints
// the postmaster's pid and waits to be killed (see TestMain).
const orphanEnv = "DEVENV_TEST_START_AND_WAIT"

func TestMain(m *testing.M) {
	if os.Getenv(orphanEnv) == "1" {
		startAndWait()
		return
	}
	os.Exit(m.Run())
}

func startAndWait() {
	pg, err := StartPostgres(context.Background(), PostgresOptions{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Printf("postmaster %d dir %s\n", pg.server.Pid, pg.Dir)
	select {}
}

// TestServersDieWithTheTestBinary: a process that started a cluster and is
// SIGKILLed (as a test binary past its timeout is) leaves no server
// running.
func TestServersDieWithTheTestBinary(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), orphanEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("read the child's postmaster pid: %v", err)
	}
	var pid int
	var dir string
	if _, err := fmt.Sscanf(line, "postmaster %d dir %s", &pid, &dir); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("child said %q: %v", line, err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if !alive(pid) {
		t.Fatalf("postmaster %d is not running while its parent lives", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("postmaster %d still runs 10 s after its parent was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}
