package mhi_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// waitUntil polls cond until it holds or d passes.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
}

// releaseCounter is a ChannelOptions.Release that counts every buffer.
type releaseCounter struct {
	mu sync.Mutex
	n  map[*pci.Buffer]int
}

func (rc *releaseCounter) release(b *pci.Buffer) {
	rc.mu.Lock()
	rc.n[b]++
	rc.mu.Unlock()
}

// check fails unless every buffer of bufs came back exactly once.
func (rc *releaseCounter) check(t testing.TB, when string, bufs []*pci.Buffer) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i, b := range bufs {
		if n := rc.n[b]; n != 1 {
			t.Errorf("%s: buffer %d released %d times, want once", when, i, n)
		}
	}
	if len(rc.n) != len(bufs) {
		t.Errorf("%s: %d distinct buffers released, want %d", when, len(rc.n), len(bufs))
	}
}

// startWithDLQueued starts the LOOPBACK pair, the DL channel's buffers
// going back to release, and queues n 4 KiB DL buffers (freed at cleanup),
// which the device then holds: the Loopback sends nothing unless asked.
func startWithDLQueued(t testing.TB, r *rig, release func(*pci.Buffer), n int) (*mhi.Channel, []*pci.Buffer) {
	t.Helper()
	ul, dl, err := r.c.ChannelPair("LOOPBACK", mhi.ChannelOptions{}, mhi.ChannelOptions{Release: release})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ul.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	dma := r.dev.DMA()
	var bufs []*pci.Buffer
	t.Cleanup(func() {
		for _, b := range bufs {
			_ = dma.Free(b)
		}
	})
	for range n {
		b, err := dma.Alloc(4096, 64)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
		if err := dl.Queue(b, len(b.Mem), mhi.EOT); err != nil {
			t.Fatal(err)
		}
	}
	dl.Ring()
	return dl, bufs
}

// TestSecondResetWaitsForTheResetInFlight: a DL Reset whose RESET_CHAN the
// device does not answer is in flight when a second Reset of the channel
// comes (as PowerDown, Close or a link endpoint's Close do). The second
// must not return before the first has handed every queued buffer back,
// and every buffer comes back exactly once, even after the device answers
// the first command late.
func TestSecondResetWaitsForTheResetInFlight(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{Timeout: 500 * time.Millisecond})
	r.powerUp()
	rc := &releaseCounter{n: map[*pci.Buffer]int{}}
	dl, bufs := startWithDLQueued(t, r, rc.release, 8)
	ctx := context.Background()

	r.m.HoldCommands(true)
	defer r.m.HoldCommands(false)
	cmds := r.c.Stats().Commands
	first := make(chan error, 1)
	go func() { first <- dl.Reset(ctx) }()
	waitUntil(t, 5*time.Second, "the first RESET_CHAN issued", func() bool { return r.c.Stats().Commands > cmds })

	err2 := dl.Reset(ctx)
	rc.check(t, "when the second Reset returned", bufs)
	err1 := <-first
	if !errors.Is(err1, mhi.ErrTimeout) {
		t.Errorf("first Reset = %v, want ErrTimeout (the device held the command)", err1)
	}
	if err2 != nil {
		t.Errorf("second Reset = %v, want nil (the channel is down once the first returned)", err2)
	}

	// The device answers the abandoned command now; nothing comes back
	// twice, and the channel can be claimed and started again.
	r.m.HoldCommands(false)
	waitUntil(t, 5*time.Second, "the held RESET_CHAN processed", func() bool { return r.m.Stats().Commands > cmds })
	rc.check(t, "after the late completion", bufs)
	if err := dl.Start(ctx); err != nil {
		t.Fatalf("start after the reset: %v", err)
	}
}

// TestChannelResetDuringRecoveryStaysReset: a client that closes its
// channels when it learns of a SYS_ERR (as a link endpoint's owner does)
// must find them released after recovery — not restarted by recovery,
// which would leave them running with no client and make the next claim
// fail with "in use" — and get every queued buffer back by the time its
// Reset returns.
func TestChannelResetDuringRecoveryStaysReset(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	rng := rand.New(rand.NewPCG(21, 22))
	l.exchange(t, rng, 20, 4096)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resets := make(chan error, 2)
	unsub := r.c.Subscribe(func(e mhi.Event) {
		if e.Kind == mhi.EventSysErr {
			// OnEvent must not block: close from another goroutine.
			go func() {
				resets <- l.ul.Reset(ctx)
				resets <- l.dl.Reset(ctx)
			}()
		}
	})
	defer unsub()
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-resets; err != nil {
			t.Errorf("Reset during recovery: %v", err)
		}
	}
	// The DL buffers are all back when Reset returned (none lost).
	l.mu.Lock()
	if n := len(l.rxFree); n != 8 {
		t.Errorf("%d of 8 DL buffers back after Reset", n)
	}
	l.mu.Unlock()
	r.waitEvent(mhi.EventRecovered, 10*time.Second)

	// Claimed again by a new client: it must not be in use.
	l2 := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l2.exchange(t, rng, 20, 4096)
}
