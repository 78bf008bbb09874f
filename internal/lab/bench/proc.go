package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// procStat is a process's CPU time and peak memory, read from /proc.
type procStat struct {
	cpu     time.Duration // user + system
	peakRSS int64         // VmHWM, bytes
}

// readPostgresProc is readProc for a Postgres backend or walsender: a pid
// that Postgres reported may belong to another machine, where a local
// process of that number is someone else.
func readPostgresProc(pid int) (procStat, bool) {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
		return procStat{}, false
	}
	return readProc(pid)
}

// readProc reads pid's CPU time and peak RSS; ok is false when the
// process is not visible (another machine, or gone).
func readProc(pid int) (procStat, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	// The command name may contain spaces: fields start after the last ')'.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) < 13 {
		return procStat{}, false
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	st := procStat{cpu: time.Duration(utime+stime) * time.Second / ticks}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				st.peakRSS = kb << 10
			}
		}
	}
	return st, true
}

// child is a process the benchmark started and measures.
type child struct {
	cmd  *exec.Cmd
	done chan error
}

func startChild(name string, args []string, logFile string) (*child, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = withoutRelayEnv(os.Environ())
	out, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	devenv.DiesWithParent(cmd)
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan error, 1)}
	go func() {
		c.done <- cmd.Wait()
		out.Close()
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop sends SIGTERM and waits (SIGKILL after a while).
func (c *child) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		return err
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		return <-c.done
	}
}

// cpuShare is the CPU time each process of the pipeline used during a run.
type cpuShare struct {
	relay, nats, walsender, writers         time.Duration
	natsKnown, walsenderKnown, writersKnown bool
}

// meter reads the pipeline's processes at the start and end of a run.
type meter struct {
	b                      *bench
	relayPID, walsndPID    int
	relay, nats, walsnd    procStat
	natsKnown, walsndKnown bool
}

// startMeter starts measuring the relay, nats-server and the walsender
// serving the scenario's slot.
func (b *bench) startMeter(ctx context.Context, sc scenario, relayPID int) *meter {
	m := &meter{b: b, relayPID: relayPID, walsndPID: slotPID(ctx, b.pool, sc.slot)}
	m.relay, _ = readProc(relayPID)
	m.nats, m.natsKnown = b.natsStat()
	m.walsnd, m.walsndKnown = readPostgresProc(m.walsndPID)
	return m
}

func (m *meter) stop() cpuShare {
	var c cpuShare
	if st, ok := readProc(m.relayPID); ok {
		c.relay = st.cpu - m.relay.cpu
	}
	if st, ok := m.b.natsStat(); ok && m.natsKnown {
		c.nats, c.natsKnown = st.cpu-m.nats.cpu, true
	}
	if st, ok := readPostgresProc(m.walsndPID); ok && m.walsndKnown {
		c.walsender, c.walsenderKnown = st.cpu-m.walsnd.cpu, true
	}
	return c
}

// watchWalsender follows the CPU time of the walsender serving slot while
// a reader that is not the relay streams from it; the walsender exits
// with its reader, so it is sampled as it goes (the last 50ms may be
// missed). The returned function stops watching and reports the time.
func watchWalsender(ctx context.Context, pool *pgxpool.Pool, slot string) func() (time.Duration, bool) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var cpu time.Duration
	var seen bool
	go func() {
		defer close(done)
		for wctx.Err() == nil {
			if pid := slotPID(wctx, pool, slot); pid != 0 {
				if st, ok := readPostgresProc(pid); ok {
					cpu, seen = st.cpu, true
				}
			}
			select {
			case <-wctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() (time.Duration, bool) {
		cancel()
		<-done
		return cpu, seen
	}
}

// withoutRelayEnv drops the relay's OUTBOX_* variables: the children are
// configured by their flags alone, so a variable exported for a real relay
// (OUTBOX_SLOT, OUTBOX_PG_URL_FILE, ...) cannot redirect or break them.
// OUTBOX_RELAY_TEST_MAIN stays: it is how a test binary standing in for
// the program (Options.Self) knows to run main. OUTBOX_CPU_PROFILE stays
// too: exported for bench, it profiles every relay bench starts (with
// {pid} in the name, a file each), which is how the relay's CPU is
// profiled under the benchmark's load.
func withoutRelayEnv(env []string) []string {
	kept := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OUTBOX_") || strings.HasPrefix(kv, "OUTBOX_RELAY_TEST_MAIN=") ||
			strings.HasPrefix(kv, "OUTBOX_CPU_PROFILE=") {
			kept = append(kept, kv)
		}
	}
	return kept
}
