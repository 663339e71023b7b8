package sessionloop

import (
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
