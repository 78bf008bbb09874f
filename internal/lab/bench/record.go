package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Record is the JSON report (--json): every figure of a run under a
// stable key (figures.go), with what a reader needs to judge them: the
// commit measured, the machine, how loaded it was, the servers' versions
// and the exact command. docs/bench/report.json is the run the README and
// docs/ quote; TestDocsQuoteTheReport fails when a page quotes a figure it
// does not hold.
type Record struct {
	// Commit is the source measured: the binary's VCS stamp, or (go run
	// does not stamp) git's HEAD in the working directory; "-dirty" when
	// tracked files differed from it.
	Commit     string    `json:"commit"`
	CommitFrom string    `json:"commit_from"`
	Command    string    `json:"command"`
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	// Error is the step that failed, when one did: the figures are then
	// those measured before it.
	Error    string             `json:"error,omitempty"`
	Machine  Machine            `json:"machine"`
	Load     Load               `json:"load"`
	Versions Versions           `json:"versions"`
	Figures  map[string]float64 `json:"figures"`
	// Tables is the run's printed tables, as they appeared on stdout.
	Tables string `json:"tables"`
}

// Machine is where the run was.
type Machine struct {
	CPUModel    string `json:"cpu_model"`
	Cores       int    `json:"cores"`
	MemoryBytes int64  `json:"memory_bytes"`
	Kernel      string `json:"kernel"`
}

// Load is the machine's 1-minute load average during the run, read from
// /proc/loadavg at the start, every LoadEvery, and at the end: on a
// shared machine it says how much of the spread is other work.
type Load struct {
	Start   float64      `json:"start"`
	End     float64      `json:"end"`
	Min     float64      `json:"min"`
	Max     float64      `json:"max"`
	Mean    float64      `json:"mean"`
	Samples []LoadSample `json:"samples"`
}

// LoadSample is one reading, At seconds after the start.
type LoadSample struct {
	At  float64 `json:"at_s"`
	One float64 `json:"one_minute"`
}

// LoadEvery is how often the load is sampled.
const LoadEvery = 15 * time.Second

// Versions are the software measured.
type Versions struct {
	Go         string `json:"go"`
	Postgres   string `json:"postgres"`
	NATSServer string `json:"nats_server"`
}

// recorder gathers a Record while the benchmark runs.
type recorder struct {
	mu   sync.Mutex
	rec  Record
	stop func()
}

// startRecorder notes the command, commit and machine, and samples the
// load until finish.
func startRecorder(ctx context.Context) *recorder {
	commit, from := sourceCommit(ctx)
	r := &recorder{rec: Record{
		Commit: commit, CommitFrom: from, Command: commandLine(os.Args),
		Started: time.Now().UTC(), Machine: readMachine(),
		Versions: Versions{Go: runtime.Version()},
	}}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r.sampleLoad()
			select {
			case <-lctx.Done():
				return
			case <-time.After(LoadEvery):
			}
		}
	}()
	r.stop = func() {
		cancel()
		<-done
	}
	return r
}

func (r *recorder) sampleLoad() {
	one, ok := loadAverage()
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec.Load.Samples = append(r.rec.Load.Samples, LoadSample{At: round(time.Since(r.rec.Started).Seconds(), 1), One: one})
}

// finish stops the sampling and returns the record with the figures and
// tables; failed is the error that ended the run early, or nil.
func (r *recorder) finish(figures map[string]float64, tables string, failed error) Record {
	r.stop()
	r.sampleLoad()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	rec.Finished, rec.Figures, rec.Tables = time.Now().UTC(), figures, tables
	if failed != nil {
		rec.Error = failed.Error()
	}
	rec.Load = summarizeLoad(rec.Load.Samples)
	return rec
}

func summarizeLoad(samples []LoadSample) Load {
	l := Load{Samples: samples}
	if len(samples) == 0 {
		return l
	}
	l.Start, l.End, l.Min, l.Max = samples[0].One, samples[len(samples)-1].One, samples[0].One, samples[0].One
	var sum float64
	for _, s := range samples {
		l.Min, l.Max, sum = min(l.Min, s.One), max(l.Max, s.One), sum+s.One
	}
	l.Mean = round(sum/float64(len(samples)), 2)
	return l
}

// writeRecord writes rec as indented JSON to path.
func writeRecord(path string, rec Record) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

// ReadRecord reads a JSON report written by --json.
func ReadRecord(path string) (Record, error) {
	var rec Record
	data, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("read the benchmark report %s: %w", path, err)
	}
	return rec, nil
}

// commandLine is the command as typed, the program named by its base
// name (go run's binary lives in a temporary directory).
func commandLine(args []string) string {
	if len(args) == 0 {
		return ""
	}
	parts := []string{"outbox-relay"}
	for _, a := range args[1:] {
		if a == "" || strings.ContainsAny(a, " '\"$*?") {
			a = strconv.Quote(a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// sourceCommit is the commit measured: the binary's VCS stamp when it has
// one, else git's HEAD in the working directory (go run builds from it),
// "-dirty" when tracked files differ; "unknown" without either.
func sourceCommit(ctx context.Context) (commit, from string) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev, "the binary's build stamp"
		}
	}
	head, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown", "no build stamp, no git checkout"
	}
	commit = strings.TrimSpace(string(head))
	if changed, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err != nil || len(bytes.TrimSpace(changed)) > 0 {
		commit += "-dirty"
	}
	return commit, "git HEAD of the working directory"
}

// readMachine reads the CPU model, memory and kernel from /proc.
func readMachine() Machine {
	m := Machine{Cores: runtime.NumCPU()}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseInt(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 10, 64); err == nil {
		m.MemoryBytes = kb << 10
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// procField returns the value of the first "name: value" line of a /proc
// file, "" when absent.
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverage reads the 1-minute load average.
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return v, err == nil
}
