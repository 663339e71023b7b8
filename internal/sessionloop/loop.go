// Package sessionloop is what a data session's goroutine needs whatever
// the control protocol (link/mbim, link/qmi): the reported step with its
// change notification, the wake-up channel indications signal, the loss
// they record, and waiting that ends early when the session is closed or
// something happened.
package sessionloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Steps holds a session's current step (S) and, for failure steps, its
// error; Changed is closed on every change. The zero value is not ready:
// use NewSteps.
type Steps[S any] struct {
	mu      sync.Mutex
	state   S
	err     error
	changed chan struct{}
}

// NewSteps returns steps starting at initial.
func NewSteps[S any](initial S) *Steps[S] {
	return &Steps[S]{state: initial, changed: make(chan struct{})}
}

// Set records a step and wakes everyone waiting for a change.
func (s *Steps[S]) Set(st S, err error) {
	s.mu.Lock()
	s.state, s.err = st, err
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Get returns the step, its error, and a channel closed at the next
// change.
func (s *Steps[S]) Get() (S, error, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.err, s.changed
}

// Wait waits until final says the current step ends the wait (returning
// its error) or ctx ends (returning the step it was in and ctx's error).
func (s *Steps[S]) Wait(ctx context.Context, final func(st S, err error) (bool, error)) (S, error) {
	for {
		st, err, ch := s.Get()
		if done, err := final(st, err); done {
			return st, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// Loop is the session goroutine's context (cancelled by Stop), its
// wake-up token and the loss indications record.
type Loop struct {
	ctx  context.Context
	stop context.CancelFunc
	kick chan struct{} // something changed: re-evaluate (holds one token)
	done chan struct{} // closed when the Go goroutine returns

	mu   sync.Mutex
	lost error
	// reset: the modem restarted (ModemReset) since the last attempt
	// began.
	reset bool

	// testSleep and testJitter replace the clock and the randomness of
	// Supervise's back-off in tests.
	testSleep  func(d time.Duration, wake bool) bool
	testJitter func() float64
}

// NewLoop returns a running loop.
func NewLoop() *Loop {
	ctx, cancel := context.WithCancel(context.Background())
	return &Loop{ctx: ctx, stop: cancel, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// Go runs fn as the loop's goroutine (once).
func (l *Loop) Go(fn func()) {
	go func() {
		defer close(l.done)
		fn()
	}()
}

// Close stops the loop and waits for its goroutine; if ctx ends first it
// still waits, and returns ctx's error.
func (l *Loop) Close(ctx context.Context) error {
	l.stop()
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		<-l.done
		return ctx.Err()
	}
}

// Hooks are a session's parts that Supervise runs.
type Hooks struct {
	// Up makes one bring-up attempt; nil means connected.
	Up func() error
	// Failed reports a failed attempt (the loop is still running).
	Failed func(error)
	// Connected reports a successful attempt.
	Connected func()
	// Watch waits while connected and returns why the connection was
	// lost, or nil when the loop stopped.
	Watch func() error
	// Lost reports a lost connection; the next attempt follows at once.
	Lost func(cause error)
	// Shutdown runs once when the loop stopped.
	Shutdown func()
}

// Supervise keeps a session up until the loop stops: an attempt, and
// after a failure another one after a back-off (retryDelay: from retry,
// doubling up to MaxRetry, with jitter); after a loss, at once. A Signal
// (an indication: the SIM, registration or packet service changed)
// cuts a back-off short, but never before its first part (retry, or the
// whole back-off when jitter made it shorter: at least 3/4 of retry)
// has passed, so a network that refuses the PDN and keeps indicating
// gets at most one attempt per 3/4 of retry. A ModemReset ends any
// back-off at once: an attempt that failed because the modem was
// restarting (a SYS_ERR: its control channel was down) never reached
// the network, and the modem back is when to try again, not seconds
// later. A loss recorded before an attempt is dropped: it belongs to an
// earlier connection.
func (l *Loop) Supervise(retry time.Duration, h Hooks) {
	failures := 0
	for {
		l.TakeLost()
		err := h.Up()
		if l.ctx.Err() != nil {
			h.Shutdown()
			return
		}
		if err != nil {
			h.Failed(err)
			if l.resetPending() {
				// The modem restarted while the attempt ran (its
				// failure is likely the restart's): try again.
				continue
			}
			d := retryDelay(retry, failures, l.jitter())
			failures++
			// The floor ignores Signals (not a ModemReset); the rest
			// of the back-off does not.
			ok := l.sleep(min(retry, d), false)
			if ok && d > retry && !l.resetPending() {
				ok = l.sleep(d-retry, true)
			}
			if !ok {
				h.Shutdown()
				return
			}
			continue
		}
		failures = 0
		h.Connected()
		cause := h.Watch()
		if cause == nil {
			h.Shutdown()
			return
		}
		h.Lost(cause)
	}
}

// MaxRetry bounds Supervise's back-off: a modem refused for a long time
// is still retried, about once a minute (a library cannot ask the user
// whether to go on).
const MaxRetry = time.Minute

// retryDelay is the back-off after the n-th consecutive failure (0 for
// the first): retry·2^n, at most MaxRetry (and at least retry), less up
// to a quarter of it by jitter (0 ≤ jitter < 1), so that modems refused
// together (a network failure, 3GPP cause 38) do not retry in step.
func retryDelay(retry time.Duration, n int, jitter float64) time.Duration {
	d := retry
	for i := 0; i < n && d < MaxRetry; i++ {
		d *= 2
	}
	d = max(min(d, MaxRetry), retry)
	return d - time.Duration(jitter*float64(d)/4)
}

// sleep is Sleep, or a test's clock.
func (l *Loop) sleep(d time.Duration, wake bool) bool {
	if l.testSleep != nil {
		return l.testSleep(d, wake)
	}
	return l.Sleep(d, wake)
}

// jitter is a uniform number in [0, 1).
func (l *Loop) jitter() float64 {
	if l.testJitter != nil {
		return l.testJitter()
	}
	return rand.Float64()
}

// Context is cancelled by Stop.
func (l *Loop) Context() context.Context { return l.ctx }

// Stop cancels the loop's context.
func (l *Loop) Stop() { l.stop() }

// Kicked receives a token after Signal.
func (l *Loop) Kicked() <-chan struct{} { return l.kick }

// Signal wakes the loop (never blocks; one pending token at most).
func (l *Loop) Signal() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// SetLost records that the connection is gone (the first cause wins) and
// wakes the loop.
func (l *Loop) SetLost(err error) {
	l.mu.Lock()
	if l.lost == nil {
		l.lost = err
	}
	l.mu.Unlock()
	l.Signal()
}

// ModemReset records that the modem restarted under the session (its
// function lost its state: a SYS_ERR, and again when it was recovered)
// as a loss with cause err, and ends Supervise's back-off at once (see
// there).
func (l *Loop) ModemReset(err error) {
	l.mu.Lock()
	if l.lost == nil {
		l.lost = err
	}
	l.reset = true
	l.mu.Unlock()
	l.Signal()
}

// TakeLost returns and clears the recorded loss (and a ModemReset).
func (l *Loop) TakeLost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.lost
	l.lost, l.reset = nil, false
	return err
}

// resetPending reports a ModemReset since the last TakeLost.
func (l *Loop) resetPending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reset
}

// Sleep waits d, or until the loop stops (false), or, with wake, until
// Signal (something happened that may change the outcome); without
// wake, until a ModemReset.
func (l *Loop) Sleep(d time.Duration, wake bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return false
		case <-t.C:
			return true
		case <-l.kick:
			if wake || l.resetPending() {
				return true
			}
		}
	}
}

// Until calls check until it reports done, fails, or d passes (then it
// returns timeout()). Between checks it waits for a Signal or poll.
func (l *Loop) Until(d, poll time.Duration, check func() (bool, error), timeout func() error) error {
	deadline := time.Now().Add(d)
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return timeout()
		}
		if !l.Sleep(min(left, poll), true) {
			return l.ctx.Err()
		}
	}
}

// Ends names the steps that end WaitUp: Up when the configuration read
// by Config is set, Failed with the attempt's error, Closed with
// ErrClosed. Protocol names the session in the error of a wait cut short
// by its context ("mbim", "qmi").
type Ends[S comparable, C any] struct {
	Up, Failed, Closed S
	ErrClosed          error
	Protocol           string
	// Config reads the session's configuration and whether it is set.
	Config func() (C, bool)
	// Retry, if set, says which failed attempts do not end the wait:
	// for those WaitUp waits for the session's next attempt (after its
	// back-off) instead.
	Retry func(error) bool
}

// WaitUp waits until the session is up and returns its configuration, or
// until an attempt fails (unless Ends.Retry accepts its error) or the
// session closes, and returns why. A wait ended by ctx says which step
// the session was still in and wraps ctx's error and, if an attempt
// failed meanwhile, the last attempt's.
func WaitUp[S comparable, C any](ctx context.Context, s *Steps[S], e Ends[S, C]) (C, error) {
	var (
		cfg  C
		last error // the newest failure Retry accepted
	)
	st, err := s.Wait(ctx, func(st S, err error) (bool, error) {
		switch st {
		case e.Up:
			// The configuration is set before the step and cleared
			// before the next one: if it is already gone, the step
			// is about to change.
			var ok bool
			cfg, ok = e.Config()
			return ok, nil
		case e.Failed:
			if e.Retry != nil && err != nil && e.Retry(err) {
				last = err
				return false, nil
			}
			return true, err
		case e.Closed:
			return true, e.ErrClosed
		}
		return false, nil
	})
	var zero C
	switch {
	case err == nil:
		return cfg, nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()) && last != nil:
		return zero, fmt.Errorf("%s: session still %v: %w (the last attempt: %w)", e.Protocol, st, err, last)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return zero, fmt.Errorf("%s: session still %v: %w", e.Protocol, st, err)
	}
	return zero, err
}

// Report tells of a step: it logs it (Info with an error, Debug without,
// under what), calls progress if it is set, and only then records it, so
// that a waiter that returned has seen its step reported.
func (s *Steps[S]) Report(log *slog.Logger, what string, st S, err error, progress func(S, error)) {
	if err != nil {
		log.Info(what, "state", st, "err", err)
	} else {
		log.Debug(what, "state", st)
	}
	if progress != nil {
		progress(st, err)
	}
	s.Set(st, err)
}
