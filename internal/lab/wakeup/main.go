// Command wakeup measures what one wake-up of an idle Go process costs on
// this machine: the floor under the relay's CPU per event at a steady
// rate, where each event wakes the relay (for the change from Postgres,
// for its PubAck from NATS) rather than finding work waiting.
//
// A receiver (GOMAXPROCS=1, as the relay runs) reads each ~300-byte
// message from a loopback TCP socket as it arrives and answers with 20
// bytes, as the relay answers a change with a publish; a sender, this
// program again in a process of its own, paces the messages. It prints
// the receiver's CPU time (user and system) per wake-up:
//
//	go run ./internal/lab/wakeup 100 1000 2000
package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

const (
	seconds = 8
	size    = 300
)

func main() {
	runtime.GOMAXPROCS(1)
	if len(os.Args) == 4 && os.Args[1] == "send" {
		if err := send(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "wakeup: send:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: wakeup RATE... (messages per second)")
		os.Exit(2)
	}
	for _, arg := range os.Args[1:] {
		rate, err := strconv.Atoi(arg)
		if err != nil || rate <= 0 {
			fmt.Fprintf(os.Stderr, "wakeup: rate %q: want a positive number of messages per second\n", arg)
			os.Exit(2)
		}
		if err := receive(rate); err != nil {
			fmt.Fprintln(os.Stderr, "wakeup:", err)
			os.Exit(1)
		}
	}
}

// receive starts a sender at rate and reads what it sends, answering
// each read.
func receive(rate int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	sender := exec.Command(self, "send", ln.Addr().String(), strconv.Itoa(rate))
	sender.Stderr = os.Stderr
	if err := sender.Start(); err != nil {
		return fmt.Errorf("start the sender: %w", err)
	}
	defer func() { _ = sender.Wait() }()
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	start, bytes, reads := cpuTime(), 0, 0
	for {
		n, err := c.Read(buf)
		if err != nil {
			break // the sender closed the connection: done
		}
		bytes += n
		reads++
		if _, err := c.Write(buf[:20]); err != nil {
			return err
		}
	}
	took := cpuTime() - start
	fmt.Printf("%d messages/s: %d messages in %d reads, receiver CPU %.1f µs per read\n",
		rate, bytes/size, reads, float64(took.Nanoseconds())/1e3/float64(max(reads, 1)))
	return nil
}

// send writes seconds*rate messages to addr, paced at rate.
func send(addr, rateArg string) error {
	rate, err := strconv.Atoi(rateArg)
	if err != nil {
		return err
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	go drain(c)
	msg := make([]byte, size)
	period := time.Second / time.Duration(rate)
	next := time.Now()
	for range seconds * rate {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		next = next.Add(period)
		time.Sleep(time.Until(next))
	}
	return nil
}

// drain reads the receiver's answers until the connection closes.
func drain(c net.Conn) {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
