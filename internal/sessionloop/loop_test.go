package sessionloop

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestStepsWakeWaitersOnEveryChange(t *testing.T) {
	s := NewSteps(0)
	_, _, ch := s.Get()
	s.Set(1, errors.New("x"))
	select {
	case <-ch:
	default:
		t.Fatal("Set did not close the change channel")
	}
	if st, err, _ := s.Get(); st != 1 || err == nil {
		t.Fatalf("Get = %v, %v", st, err)
	}
}

func TestLoopLostSleepUntil(t *testing.T) {
	l := NewLoop()
	defer l.Stop()
	first, second := errors.New("first"), errors.New("second")
	l.SetLost(first)
	l.SetLost(second)
	if err := l.TakeLost(); err != first {
		t.Fatalf("TakeLost = %v, want the first cause", err)
	}
	if l.TakeLost() != nil {
		t.Fatal("TakeLost did not clear")
	}
	// The SetLost above left a token: a waking sleep returns at once.
	if !l.Sleep(time.Hour, true) {
		t.Fatal("Sleep woken by Signal returned false")
	}
	n := 0
	err := l.Until(time.Hour, time.Millisecond, func() (bool, error) { n++; return n == 3, nil }, nil)
	if err != nil || n != 3 {
		t.Fatalf("Until = %v after %d checks", err, n)
	}
	tmo := errors.New("timeout")
	if err := l.Until(0, time.Millisecond, func() (bool, error) { return false, nil }, func() error { return tmo }); err != tmo {
		t.Fatalf("Until past its deadline = %v", err)
	}
	l.Stop()
	if l.Sleep(time.Hour, false) {
		t.Fatal("Sleep after Stop returned true")
	}
	if err := l.Until(time.Hour, time.Hour, func() (bool, error) { return false, nil }, nil); err == nil {
		t.Fatal("Until after Stop returned nil")
	}
}

// A network that refuses every attempt (an activation rejected with
// 3GPP cause 38, network failure) and indicates all the while: the
// back-off doubles from retry to MaxRetry with jitter, and the
// indications never cut a pause below its floor, so the attempts over
// the fake clock stay bounded.
func TestSuperviseBacksOffARefusingNetworkWithJitterAndNoTightLoop(t *testing.T) {
	const retry = 5 * time.Second
	for _, jitter := range []float64{0, 0.5, 0.999} {
		l := NewLoop()
		var now time.Duration // the fake clock
		var pauses []time.Duration
		var pause time.Duration
		attempts := 0
		l.testJitter = func() float64 { return jitter }
		l.testSleep = func(d time.Duration, wake bool) bool {
			if wake {
				// An indication arrives at once: the rest is cut.
				return true
			}
			now += d
			pause += d
			return true
		}
		l.Supervise(retry, Hooks{
			Up: func() error {
				if attempts > 0 {
					pauses = append(pauses, pause)
				}
				pause = 0
				attempts++
				if attempts == 40 {
					l.Stop()
				}
				for range 10 {
					l.Signal() // the network's indications
				}
				return errors.New("activation rejected: network failure (38)")
			},
			Failed:   func(error) {},
			Shutdown: func() {},
		})
		for i, p := range pauses {
			full := min(retry<<min(i, 20), MaxRetry)
			floor := min(retry, full-time.Duration(jitter*float64(full)/4))
			if p < floor || p < retry*3/4 || p > retry {
				t.Errorf("jitter %v: pause %d is %v, want the floor %v (at least 3/4 of %v) however often the network indicates", jitter, i, p, floor, retry)
			}
		}
		if min := time.Duration(len(pauses)) * retry * 3 / 4; now < min {
			t.Errorf("jitter %v: %d attempts in %v of fake time: a tight loop", jitter, attempts, now)
		}
	}
}

// Without indications, the pauses are the whole back-off: doubling from
// retry, bounded by MaxRetry, shortened by at most a quarter by jitter.
func TestRetryDelayDoublesToMaxRetryWithJitter(t *testing.T) {
	const retry = 5 * time.Second
	for _, c := range []struct {
		n      int
		jitter float64
		want   time.Duration
	}{
		{0, 0, retry}, {1, 0, 2 * retry}, {3, 0, 8 * retry}, {4, 0, MaxRetry}, {1000, 0, MaxRetry},
		{0, 0.5, retry * 7 / 8}, {2, 0.999, 20*time.Second - time.Duration(0.999*float64(20*time.Second)/4)},
		{1000, 0.999, MaxRetry - time.Duration(0.999*float64(MaxRetry)/4)},
	} {
		if got := retryDelay(retry, c.n, c.jitter); got != c.want {
			t.Errorf("retryDelay(%v, %d, %v) = %v, want %v", retry, c.n, c.jitter, got, c.want)
		}
	}
	if got := retryDelay(2*MaxRetry, 3, 0); got != 2*MaxRetry {
		t.Errorf("a retry above MaxRetry: %v, want it kept", got)
	}
}

// WaitUp with Retry waits through the failed attempts Retry accepts (a
// network refusing for a while) until the session is up; a failure it
// does not accept ends the wait; a wait its context ends wraps both the
// context's error and the last failure.
func TestWaitUpWaitsThroughFailuresRetryAccepts(t *testing.T) {
	const (
		idle = iota
		up
		failed
		closed
	)
	transient, permanent := errors.New("refused for now"), errors.New("refused for good")
	ends := func(cfg *int) Ends[int, int] {
		return Ends[int, int]{Up: up, Failed: failed, Closed: closed, ErrClosed: errors.New("closed"), Protocol: "test",
			Config: func() (int, bool) { return *cfg, *cfg != 0 },
			Retry:  func(err error) bool { return errors.Is(err, transient) }}
	}

	s, cfg := NewSteps(idle), 0
	s.Set(failed, transient) // an earlier attempt, still failed
	got := make(chan error, 1)
	go func() { _, err := WaitUp(context.Background(), s, ends(&cfg)); got <- err }()
	s.Set(idle, nil)
	s.Set(failed, transient)
	select {
	case err := <-got:
		t.Fatalf("WaitUp returned %v on a failure Retry accepts", err)
	default:
	}
	cfg = 7
	s.Set(up, nil)
	if err := <-got; err != nil {
		t.Fatalf("WaitUp after the session came up: %v", err)
	}

	s = NewSteps(idle)
	go func() { _, err := WaitUp(context.Background(), s, ends(new(int))); got <- err }()
	s.Set(failed, transient)
	s.Set(failed, permanent)
	if err := <-got; err != permanent {
		t.Fatalf("WaitUp after a failure Retry refuses: %v, want it", err)
	}

	s = NewSteps(idle)
	s.Set(failed, transient)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err := WaitUp(ctx, s, ends(new(int)))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, transient) {
		t.Fatalf("WaitUp ended by its context: %v, want the deadline and the last failure", err)
	}
}

// An attempt that fails because the modem is restarting (its control
// channel is down during a SYS_ERR) is tried again as soon as the modem
// is back (ModemReset), not after the back-off's floor: with an hour's
// retry, the second attempt follows the reset. Before ModemReset the
// reset was a Signal, which the floor ignores, and every SYS_ERR cost a
// session RetryInterval·3/4 or more.
func TestSuperviseRetriesAtOnceAfterAModemReset(t *testing.T) {
	for _, during := range []bool{false, true} {
		l := NewLoop()
		attempts := make(chan int, 10)
		n := 0
		errDown := errors.New("channel not running (device in SYS_ERR)")
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.Supervise(time.Hour, Hooks{
				Up: func() error {
					n++
					attempts <- n
					if n == 1 {
						if during {
							// The modem came back before the attempt
							// gave up.
							l.ModemReset(errDown)
						}
						return errDown
					}
					l.Stop()
					return errDown
				},
				Failed:   func(error) {},
				Shutdown: func() {},
			})
		}()
		if got := <-attempts; got != 1 {
			t.Fatalf("first attempt %d", got)
		}
		if !during {
			// The loop is in (or about to enter) its back-off's floor;
			// ModemReset ends it whenever it lands.
			l.ModemReset(errDown)
		}
		select {
		case got := <-attempts:
			if got != 2 {
				t.Fatalf("attempt %d", got)
			}
		case <-time.After(time.Minute):
			t.Fatalf("reset during the attempt %v: no second attempt a minute after the modem reset (retry 1 h)", during)
		}
		<-done
	}
}
