package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CloneStandby makes a physical standby of p: it stops p cleanly, copies
// its data directory (a cold copy is a consistent base backup, and needs
// no pg_basebackup, which relocatable builds such as the npm package lack),
// starts p again, and starts the copy in standby mode with settings (for
// example primary_conninfo and primary_slot_name) on a port of its own.
// The copy's replication slots are removed: they are p's.
func (p *Postgres) CloneStandby(ctx context.Context, settings map[string]string) (*Postgres, error) {
	if err := p.Stop(ctx, "fast"); err != nil {
		return nil, fmt.Errorf("stop the primary for the copy: %w", err)
	}
	s := &Postgres{binDir: p.binDir, libDir: p.libDir, major: p.major, cred: p.cred}
	var err error
	if s.Dir, err = os.MkdirTemp("", "outbox-relay-pg-"); err != nil {
		return nil, err
	}
	if err := s.chown(s.Dir); err != nil {
		s.Close()
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", p.dataDir(), s.dataDir()).CombinedOutput(); err != nil {
		s.Close()
		return nil, fmt.Errorf("copy the data directory: %v: %s", err, out)
	}
	if err := p.Start(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("start the primary again: %w", err)
	}
	slots, _ := filepath.Glob(filepath.Join(s.dataDir(), "pg_replslot", "*"))
	for _, slot := range slots {
		if err := os.RemoveAll(slot); err != nil {
			s.Close()
			return nil, err
		}
	}
	signal := filepath.Join(s.dataDir(), "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.chown(signal); err != nil {
		s.Close()
		return nil, err
	}
	if s.Port, err = FreePort(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.writeConfig(settings); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Promote promotes a standby and waits until it accepts writes.
func (p *Postgres) Promote(ctx context.Context) error {
	return p.run(ctx, "pg_ctl", "-D", p.dataDir(), "-w", "-t", "120", "promote")
}

// Kill sends SIGKILL to the postmaster and to every process it started,
// at once, as a machine that loses power stops them: nothing is flushed,
// no connection is closed politely. It waits until they are gone.
func (p *Postgres) Kill() error {
	b, err := os.ReadFile(filepath.Join(p.dataDir(), "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("read the postmaster's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		return fmt.Errorf("read the postmaster's pid: %w", err)
	}
	pids := append(childrenOf(pid), pid)
	for _, q := range pids {
		_ = syscall.Kill(q, syscall.SIGKILL)
	}
	deadline := time.Now().Add(time.Minute)
	for _, q := range pids {
		for syscall.Kill(q, 0) == nil && !zombie(q) {
			if time.Now().After(deadline) {
				return errors.New("the killed Postgres processes did not end within a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		q, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procField(q, 1); ppid == pid {
			out = append(out, q)
		}
	}
	return out
}

// zombie reports whether pid has exited and waits for its parent to reap
// it (the postmaster's children, once the postmaster is dead, are reaped
// by init).
func zombie(pid int) bool {
	_, state := procField(pid, 0)
	return state == "Z"
}

// procField reads /proc/pid/stat: after the command name, field i
// (0 = state, 1 = ppid), as a number and as text.
func procField(pid, i int) (int, string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, ""
	}
	fields := strings.Fields(s[end+1:])
	if i >= len(fields) {
		return 0, ""
	}
	n, _ := strconv.Atoi(fields[i])
	return n, fields[i]
}
