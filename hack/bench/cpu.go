package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// threads records the OS thread of each endpoint goroutine role while it
// runs locked (experiment.Options.ThreadHook), so that the bench can read the
// role's CPU clock around a measurement window.
//
// The hook runs on the role's own thread: it reads CLOCK_THREAD_CPUTIME_ID
// there (the clock the measurement is defined by) and records the thread
// id. The window is then read from the bench goroutine through the same
// clock addressed by thread id, MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED),
// which is what pthread_getcpuclockid returns: reading it does not need
// the role's goroutine to wake up, so it does not disturb what it measures.
type threads struct {
	mu   sync.Mutex
	tids map[string]int
	// mismatch notes a role whose by-id clock disagreed with its own
	// CLOCK_THREAD_CPUTIME_ID reading (it never should).
	mismatch string
}

func newThreads() *threads { return &threads{tids: map[string]int{}} }

// hook is an experiment.Options.ThreadHook.
func (t *threads) hook(role string) func() {
	tid := unix.Gettid()
	own, err1 := clock(unix.CLOCK_THREAD_CPUTIME_ID)
	byID, err2 := clock(threadClock(tid))
	t.mu.Lock()
	defer t.mu.Unlock()
	if err1 != nil || err2 != nil || byID < own {
		t.mismatch = fmt.Sprintf("%s: own %v, by id %v (%v %v)", role, own, byID, err1, err2)
	}
	t.tids[role] = tid
	return func() {
		t.mu.Lock()
		delete(t.tids, role)
		t.mu.Unlock()
	}
}

// sample reads the CPU time of every role now.
func (t *threads) sample() map[string]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := make(map[string]time.Duration, len(t.tids))
	for role, tid := range t.tids {
		if d, err := clock(threadClock(tid)); err == nil {
			s[role] = d
		}
	}
	return s
}

// threadClock is Linux's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): the
// clock id of another thread's CPU clock (include/linux/posix-timers.h).
func threadClock(tid int) int32 {
	const cpuclockSched, perThread = 2, 4
	return int32(^uint32(tid)<<3 | cpuclockSched | perThread)
}

func clock(id int32) (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hogArg makes the bench binary a CPU hog instead (see startHog).
const hogArg = "-hog-child"

// startHog starts the concurrent CPU load of table 1: a child process (the
// bench binary itself) spinning on every core. A separate process, like
// the `stress` run in the netdev thread, competes with the endpoint's
// threads in the kernel's scheduler rather than in Go's, which is where a
// dedicated refiller and a shared worker differ. The caller stops it.
func startHog() (stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, hogArg)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}, nil
}

// hog spins on every core until killed.
func hog() {
	for range runtime.NumCPU() - 1 {
		go spin()
	}
	spin()
}

func spin() {
	x := uint64(1)
	for {
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 {
			fmt.Println(x)
		}
	}
}
