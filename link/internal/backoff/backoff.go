// Package backoff is the RX refill's retry delay, shared by every refill
// mode of package link: the dedicated refiller, the poller when it refills
// inline, and link/experiment's shared worker.
package backoff

import "time"

// Refill back-off when the pool runs dry: short, because buffers come
// back as soon as the poller has delivered the frames holding them; capped
// well below Linux's 250 ms, which would idle a 128-slot ring for a long
// time at modem rates.
const (
	Min = 200 * time.Microsecond
	Max = 20 * time.Millisecond
)

// Backoff is a retry delay that doubles from Min up to Max. The zero value
// is reset: no retry pending.
type Backoff struct{ d time.Duration }

// Next advances the delay (Min after a reset, then twice the last, at most
// Max) and returns it.
func (b *Backoff) Next() time.Duration {
	if b.d <= 0 {
		b.d = Min
	} else {
		b.d = min(2*b.d, Max)
	}
	return b.d
}

// Reset ends the back-off: the next Next returns Min.
func (b *Backoff) Reset() { b.d = 0 }

// Delay returns the current delay, 0 when reset.
func (b Backoff) Delay() time.Duration { return b.d }
