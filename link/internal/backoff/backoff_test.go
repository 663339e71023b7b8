package backoff

import (
	"testing"
	"time"
)

func TestNextDoublesFromMinToMaxAndResetStartsOver(t *testing.T) {
	var b Backoff
	if b.Delay() != 0 {
		t.Fatalf("zero value: delay %v, want 0", b.Delay())
	}
	want := []time.Duration{
		200 * time.Microsecond, 400 * time.Microsecond, 800 * time.Microsecond,
		1600 * time.Microsecond, 3200 * time.Microsecond, 6400 * time.Microsecond,
		12800 * time.Microsecond, 20 * time.Millisecond, 20 * time.Millisecond,
	}
	for i, w := range want {
		if got := b.Next(); got != w || b.Delay() != w {
			t.Fatalf("Next #%d = %v (Delay %v), want %v", i+1, got, b.Delay(), w)
		}
	}
	b.Reset()
	if b.Delay() != 0 {
		t.Fatalf("after Reset: delay %v, want 0", b.Delay())
	}
	if got := b.Next(); got != Min {
		t.Fatalf("Next after Reset = %v, want %v", got, Min)
	}
}
