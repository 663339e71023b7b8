package experiment

import (
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestWorkerRetriesAShortRefillAndForgetsAMemberThatLeft: a refill that
// comes up short is run again after its back-off without another Submit,
// until it is not short; after Leave, Submit runs nothing.
func TestWorkerRetriesAShortRefillAndForgetsAMemberThatLeft(t *testing.T) {
	w := NewWorker(nil)
	defer w.Close()
	var calls atomic.Int32
	m := w.Join(func() bool { return calls.Add(1) <= 3 }) // short three times
	m.Submit()
	waitFor(t, 5*time.Second, "four refills", func() bool { return calls.Load() >= 4 })
	m.Leave()
	n := calls.Load()
	if n != 4 {
		t.Fatalf("%d refills, want 4 (three short, one that filled)", n)
	}
	m.Submit()
	// One goroutine runs the jobs in order: once a later member's job
	// has run, m's was skipped.
	done := make(chan struct{})
	w.Join(func() bool { close(done); return false }).Submit()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for the later member's refill")
	}
	if got := calls.Load(); got != n {
		t.Fatalf("refill ran after Leave: %d calls, want %d", got, n)
	}
}
