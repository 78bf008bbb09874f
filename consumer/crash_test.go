package consumer

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// A consumer process killed with SIGKILL between a handler's commit and
// its ack: the message comes back to a fresh consumer, which finds the
// event in processed_events, skips the handler and acks. Every event has
// its effect exactly once.
func TestKillBetweenCommitAndAck(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		const durable, total, killAfter = "billing", 6, 3
		f.consumer(durable, 2*time.Second) // redelivery 2 s after the kill
		var last uint64
		for i := 1; i <= total; i++ {
			last = f.publish(eventID(i), strconv.Itoa(i), `{"n": `+strconv.Itoa(i)+`}`)
		}

		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), envChild+"=1", envPGURL+"="+f.env.PGURL, envNATSURL+"="+f.env.NATSURL,
			envStream+"="+testStream, envDurable+"="+durable, envKillCommits+"="+strconv.Itoa(killAfter), envDriver+"="+d.name)
		var out relaytest.SyncBuffer
		child.Stdout, child.Stderr = &out, &out
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- child.Wait() }()
		t.Cleanup(func() { _ = child.Process.Kill() })
		select {
		case err := <-exited:
			var ee *exec.ExitError
			status, ok := child.ProcessState.Sys().(syscall.WaitStatus)
			if !errors.As(err, &ee) || !ok || !status.Signaled() || status.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v, want killed by SIGKILL; output:\n%s", err, out.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("child not killed within 60 s; output:\n%s", out.String())
		}
		killedID := eventID(killAfter)
		if !strings.Contains(out.String(), "committed "+killedID) {
			t.Fatalf("child output:\n%s", out.String())
		}

		// The crash landed between commit and ack: the effect and the
		// processed row of event 3 are there, and the server still waits for
		// its ack.
		eff := f.effects()
		if len(eff) != killAfter || eff[killedID] != 1 {
			t.Fatalf("effects after the kill: %v, want events 1-%d once", eff, killAfter)
		}
		if n := f.count(`SELECT count(*) FROM processed_events WHERE consumer = $1`, durable); n != killAfter {
			t.Fatalf("%d processed rows, want %d", n, killAfter)
		}
		if floor := f.info(durable).AckFloor.Stream; floor != killAfter-1 {
			t.Fatalf("ack floor %d after the kill, want %d (event %d committed, never acked)", floor, killAfter-1, killAfter)
		}

		// A fresh consumer gets the redelivery and everything left.
		seen := make(chan string, 100)
		r := f.run(f.consumer(durable, 2*time.Second), effectHandler("fresh", seen))
		relaytest.WaitFor(t, 30*time.Second, "all events acked", func() bool { return f.settled(durable, last) })
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		close(seen)
		for id := range seen {
			if id <= killedID {
				t.Errorf("the fresh consumer ran the handler for %s, already processed", id)
			}
		}
		eff = f.effects()
		for i := 1; i <= total; i++ {
			if eff[eventID(i)] != 1 {
				t.Errorf("event %d has %d effects, want 1", i, eff[eventID(i)])
			}
		}
		if !logged(r.logs.String(), killedID, "already processed; acknowledging") {
			t.Errorf("no skipped redelivery of %s in the log:\n%s", killedID, r.logs.String())
		}
	})
}

// logged reports whether a log line is about event id and says msg.
func logged(logs, id, msg string) bool {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"event_id":"`+id+`"`) && strings.Contains(line, `"message":"`+msg+`"`) {
			return true
		}
	}
	return false
}
