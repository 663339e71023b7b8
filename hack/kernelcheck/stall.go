package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// stallWatch stops a guest whose checks stall: when no verdict arrives
// for limit (-check-timeout), it cancels the guest's context (QEMU is
// killed) and remembers the last verdict, so that a hung check fails in
// minutes rather than at the run's -timeout and the report says where
// the guest hung. Its timer is its only goroutine; stop ends it.
type stallWatch struct {
	limit  time.Duration
	cancel context.CancelFunc

	mu    sync.Mutex
	timer *time.Timer
	last  string // the last verdict's check name ("" before the first)
	fired bool
}

// newStallWatch starts watching: the first verdict is due within limit
// (the boot counts). limit ≤ 0 watches nothing.
func newStallWatch(limit time.Duration, cancel context.CancelFunc) *stallWatch {
	s := &stallWatch{limit: limit, cancel: cancel}
	if limit > 0 {
		s.timer = time.AfterFunc(limit, s.fire)
	}
	return s
}

func (s *stallWatch) fire() {
	s.mu.Lock()
	s.fired = true
	s.mu.Unlock()
	s.cancel()
}

// progress records a verdict of check name and gives the next one limit.
func (s *stallWatch) progress(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = name
	if s.timer != nil && !s.fired {
		s.timer.Reset(s.limit)
	}
}

// stop ends the watch; a verdict of stalled after stop stays as it was.
func (s *stallWatch) stop() {
	if s.timer != nil {
		s.timer.Stop()
	}
}

// stalled reports whether the watch stopped the guest, and the last
// verdict before it did.
func (s *stallWatch) stalled() (last string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.fired
}

// nextCheck names the first of the guest's checks (guestChecks order)
// after last that never reported: where a stalled guest hung.
func nextCheck(r *result) string {
	for _, name := range guestChecks {
		if _, ok := r.checks[name]; !ok {
			return name
		}
	}
	return "the checks after " + guestChecks[len(guestChecks)-1]
}

// stallDetail is guest-finished's verdict on a guest the watch stopped
// limit after its last verdict last (""; none), with dumped lines of kernel
// log from its stall watcher: where it hung, the boot when /init never
// started.
func stallDetail(limit time.Duration, last string, r *result, dumped int) string {
	var where string
	switch {
	case r.boot == 0:
		where = "in the boot (no /init yet)"
	case last == "":
		where = "before the first verdict, in " + nextCheck(r)
	default:
		where = "after " + last + ", in " + nextCheck(r)
	}
	return fmt.Sprintf("stopped: no verdict for %v, hung %s (-check-timeout; %d kernel log lines from the guest's stall watcher in stall-dmesg.log)", limit, where, dumped)
}

// stallDumpAfter is how long (guest seconds) the guest's own watcher waits
// without a verdict before it prints its kernel log's tail (the
// MHISTACK-STALL-DMESG lines): half the harness's limit, because a guest
// whose clock was calibrated on a starved vCPU runs fast or slow (a 6.12
// guest counted 129 s of uptime in 75 s), and the dump must come before
// the harness stops the guest at limit. An early dump in a run that goes
// on costs nothing: the harness shows it only for failed runs.
func stallDumpAfter(limit time.Duration) int {
	if limit <= 0 {
		return 0
	}
	return max(int(limit.Seconds()/2), 5)
}

// stallDmesgPrefix starts each kernel-log line the guest's stall watcher
// prints (initScript): self-identifying, so that it can interleave with
// the checks' own output on the console.
const stallDmesgPrefix = "MHISTACK-STALL-DMESG "

// logTail returns the last n lines of the file at path that keep accepts
// (nil: all), or a note saying why there are none.
func logTail(path string, n int, keep func(line string) bool) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{fmt.Sprintf("(%v)", err)}
	}
	defer f.Close()
	var tail []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if keep != nil && !keep(line) {
			continue
		}
		tail = append(tail, line)
		if len(tail) > n {
			tail = tail[1:]
		}
	}
	return tail
}

// consoleLine tells the guest's console output from the kernel log it
// dumps at the end (between the MHISTACK-DMESG markers), which has a file
// of its own (dmesg.log).
func consoleLine() func(line string) bool {
	inDump := false
	return func(line string) bool {
		switch line {
		case "MHISTACK-DMESG-BEGIN":
			inDump = true
			return false
		case "MHISTACK-DMESG-END":
			inDump = false
			return false
		}
		return !inDump
	}
}

// printFailureLogs prints what a failed run left for a diagnosis without
// its work directory (CI keeps only the output): the tail of the guest's
// console, the modem's log, and the kernel log the guest's stall watcher
// dumped, if it did.
func printFailureLogs(r *result) {
	if r == nil || r.logDir == "" {
		return
	}
	show := func(title string, lines []string) {
		fmt.Printf("---- %s %s\n", r.scope(), title)
		for _, l := range lines {
			fmt.Printf("  | %s\n", l)
		}
	}
	show("guest console (last 40 lines)", logTail(filepath.Join(r.logDir, "serial.log"), 40, consoleLine()))
	show("modem log (last 60 lines)", logTail(filepath.Join(r.logDir, "modem.log"), 60, nil))
	if st := logTail(filepath.Join(r.logDir, "stall-dmesg.log"), 80, nil); len(st) > 0 && !strings.HasPrefix(st[0], "(") {
		show("kernel log when the checks stalled (last 80 lines)", st)
	}
}
