package link_test

import (
	"context"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestCloseDuringAResetInFlightGetsEveryBufferBackOnce: the DL channel's
// RESET_CHAN is in flight (the device holds it) when the endpoint closes.
// Close's own Reset must wait for it instead of returning at once, so that
// the pools are freed only when every buffer is home; before, the late
// Release of the first Reset hit a freed pool ("DMA buffer returned to its
// pool twice").
func TestCloseDuringAResetInFlightGetsEveryBufferBackOnce(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, timeout: 500 * time.Millisecond})
	ctx := context.Background()
	ul, dl := r.ep.Channels()
	// UL first, as Close does; the DL reset is the one left in flight.
	if err := ul.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	r.m.HoldCommands(true)
	defer r.m.HoldCommands(false)
	cmds := r.c.Stats().Commands
	first := make(chan error, 1)
	go func() { first <- dl.Reset(ctx) }()
	waitUntil(t, 5*time.Second, "the DL RESET_CHAN issued", func() bool { return r.c.Stats().Commands > cmds })

	r.ep.Close()
	r.ep.Wait()
	if err := <-first; err == nil {
		t.Error("the held DL reset succeeded; want its timeout")
	}
	if rx, rxAll, tx, txAll := link.BuffersHomeForTest(r.ep); rx != rxAll || tx != txAll {
		t.Errorf("at close: RX %d of %d and TX %d of %d buffers home", rx, rxAll, tx, txAll)
	}
	r.m.HoldCommands(false)
}

// TestEndpointClosedOnSysErrCanBeOpenedAgainAfterRecovery: an owner that
// closes its endpoint when the controller reports SYS_ERR (and opens a new
// one once recovered) must find the channel pair released: recovery
// restarts only channels whose client still wants them. Before, recovery
// restarted the pair it had captured at the SYS_ERR and link.New failed
// with "channel 100 (IP_HW0) is in use".
func TestEndpointClosedOnSysErrCanBeOpenedAgainAfterRecovery(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}})
	write(t, r.ep, udp4(t, 1, 100))
	r.snk.waitFor(t, 1, 5*time.Second)

	closed := make(chan struct{})
	recovered := make(chan struct{})
	old := r.ep
	unsub := r.c.Subscribe(func(e mhi.Event) {
		switch e.Kind {
		case mhi.EventSysErr:
			go func() { old.Close(); close(closed) }() // must not block here
		case mhi.EventRecovered:
			close(recovered)
		}
	})
	defer unsub()
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []chan struct{}{closed, recovered} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("no close or no recovery within 10 s")
		}
	}
	if rx, rxAll, tx, txAll := link.BuffersHomeForTest(old); rx != rxAll || tx != txAll {
		t.Errorf("at close: RX %d of %d and TX %d of %d buffers home", rx, rxAll, tx, txAll)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ep, err := link.New(ctx, r.c, link.Options{})
	if err != nil {
		t.Fatalf("link.New after recovery: %v", err)
	}
	r.ep = ep
	snk := newSink()
	ep.Attach(snk)
	write(t, ep, udp4(t, 2, 100))
	snk.waitFor(t, 1, 5*time.Second)
}
