package link_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestSurpriseRemovalMidTransferFailsEveryBlockedCall:
// the modem falls off the bus (registers read all-ones, DMA fails) while
// the link endpoint carries traffic both ways, a ControlPort waits in Recv
// with no deadline of its own, and a channel Reset waits for its command
// completion on a slowed device. Every one of them must return an error
// within a bounded time, Close must complete, and no goroutine may be left.
func TestSurpriseRemovalMidTransferFailsEveryBlockedCall(t *testing.T) {
	// The rig is closed by hand below (before goleak), so this test does
	// not run in parallel with others whose goroutines goleak would see.
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{TXTimeout: 20 * time.Millisecond}})
	ctx := context.Background()

	port, err := r.c.OpenControl(ctx, "MBIM", mhi.ControlOptions{BufSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	diagUL, _, err := r.c.ChannelPair("DIAG", mhi.ChannelOptions{}, mhi.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := diagUL.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// Traffic: a writer that keeps the UL ring busy (the loopback sends
	// everything back on DL), timing every WritePackets call.
	var wg sync.WaitGroup
	stopWriter := make(chan struct{})
	var writes, failedWrites atomic.Int64
	var slowestWrite atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		pkt := udp4(t, 1, 1400)
		for {
			select {
			case <-stopWriter:
				return
			default:
			}
			start := time.Now()
			n, err := writeN(r.ep, pkt, pkt, pkt, pkt)
			if d := int64(time.Since(start)); d > slowestWrite.Load() {
				slowestWrite.Store(d)
			}
			writes.Add(1)
			if err != nil || n < 4 {
				failedWrites.Add(1)
				time.Sleep(time.Millisecond) // a stack's queue backs off too
			}
		}
	}()
	waitUntil(t, 5*time.Second, "traffic in both directions", func() bool {
		s := r.ep.Stats()
		return s.TXPackets > 200 && s.RXPackets > 200
	})

	// Blocked calls: Recv with no deadline, and a Reset whose completion a
	// slowed device has not posted yet.
	type result struct {
		what string
		err  error
		took time.Duration
	}
	results := make(chan result, 2)
	var removedAt atomic.Int64
	since := func() time.Duration { return time.Duration(time.Now().UnixNano() - removedAt.Load()) }
	go func() {
		_, err := port.Recv(context.Background())
		results <- result{"ControlPort.Recv", err, since()}
	}()
	// Command completions arrive on event ring 0, whose MSI is vector 1
	// (ring index + 1, mhi.EventRing.initContext): dropping it keeps the
	// RESET completion unseen, so the Reset is still waiting when the
	// device disappears. The data rings' vectors still fire.
	r.dev.SetMSIFilter(func(vec int) (bool, time.Duration) { return vec == 1, 0 })
	go func() {
		err := diagUL.Reset(context.Background())
		results <- result{"Channel.Reset", err, since()}
	}()
	time.Sleep(5 * time.Millisecond) // the RESET command is on the ring
	removedAt.Store(time.Now().UnixNano())
	r.dev.Remove()

	const bound = 2 * time.Second
	for range 2 {
		select {
		case res := <-results:
			if !errors.Is(res.err, mhi.ErrRemoved) {
				t.Errorf("%s after removal = %v, want ErrRemoved", res.what, res.err)
			}
			t.Logf("%s returned %v after %v", res.what, res.err, res.took)
		case <-time.After(bound):
			t.Fatalf("a blocked call did not return within %v of the removal", bound)
		}
	}
	// Writers: every call returns (bounded by TXTimeout) and, once the
	// removal is known, fails.
	waitUntil(t, bound, "writes failing after removal", func() bool {
		f := failedWrites.Load()
		time.Sleep(20 * time.Millisecond)
		return failedWrites.Load() > f+2
	})
	close(stopWriter)
	wg.Wait()
	if d := time.Duration(slowestWrite.Load()); d > time.Second {
		t.Errorf("slowest WritePackets took %v", d)
	}

	// Removal makes the modem's DMA fail: the bus logs those faults with
	// the reason "device removed", which is the point and not a host
	// error (the rig would report them at close), now and until the
	// device is closed (a burst channel's poll or doorbell-mode watchdog
	// may read the context after this point). Any other fault is still
	// reported, below.
	r.lr.ForgiveFailures(func(f string) bool { return strings.Contains(f, "device removed") })

	// Teardown completes, bounded, in the order a user would do it.
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		if err := port.Close(); err != nil && !errors.Is(err, mhi.ErrRemoved) {
			t.Errorf("ControlPort.Close: %v", err)
		}
		r.close()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close after removal did not complete within 10 s")
	}
	s := r.ep.Stats()
	t.Logf("teardown took %v; %d writes (%d refused), slowest %v; TX drops %+v",
		time.Since(start), writes.Load(), failedWrites.Load(), time.Duration(slowestWrite.Load()), s.TXDrops)
	if rx, rxAll, tx, txAll := link.BuffersHomeForTest(r.ep); rx != rxAll || tx != txAll {
		t.Errorf("buffers home at close: RX %d/%d TX %d/%d", rx, rxAll, tx, txAll)
	}
	if n := r.dev.MappedBuffers(); n != 0 {
		// r.close closed the device, which unmaps everything; count
		// before would need the controller closed first, which it is.
		t.Errorf("%d DMA buffers still mapped", n)
	}
	for _, f := range r.dev.Faults() {
		if f.Reason != "device removed" {
			t.Errorf("DMA fault not caused by the removal: %v", f)
		}
	}
	goleak.VerifyNone(t)
}
