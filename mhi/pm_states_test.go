package mhi_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestStoppedChannelCompletesEveryBufferOnceWithItsLength: completions the
// device posted before STOP_CHAN are consumed after the host marked the
// channel stopped. They must complete their buffers then, with the lengths
// the device wrote, and the first completion after Start must not walk
// over them again.
func TestStoppedChannelCompletesEveryBufferOnceWithItsLength(t *testing.T) {
	// qcom-qdu100: LOOPBACK's UL and DL complete on event ring 2, which
	// serves nothing else, so the test can poll it itself.
	r := newRig(t, "qcom-qdu100", sim.Options{}, mhi.Options{})
	r.powerUp()
	ul, dl, err := r.c.ChannelPair("LOOPBACK", mhi.ChannelOptions{}, mhi.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	er := dl.EventRing()
	if ul.EventRing() != er {
		t.Fatal("LOOPBACK UL and DL are not on one event ring")
	}
	er.SetNotify(func() {}) // completions wait until the test polls
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ch := range []*mhi.Channel{ul, dl} {
		if err := ch.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dma := r.dev.DMA()
	alloc := func() *pci.Buffer {
		b, err := dma.Alloc(4096, 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = dma.Free(b) })
		return b
	}
	const transfers = 5
	for range transfers {
		if err := dl.Queue(alloc(), 4096, mhi.EOT); err != nil {
			t.Fatal(err)
		}
	}
	dl.Ring()
	type done struct {
		buf *pci.Buffer
		n   int
	}
	var ulDone, dlDone []done
	var dlData [][]byte
	poll := func() {
		er.Poll(64, func(c mhi.Completion) {
			switch c.Channel {
			case ul:
				ulDone = append(ulDone, done{c.Buf, c.Len})
			case dl:
				dlDone = append(dlDone, done{c.Buf, c.Len})
				dlData = append(dlData, bytes.Clone(c.Buf.Mem[:c.Len]))
			}
		})
	}
	send := func(i int) []byte {
		data := bytes.Repeat([]byte{byte(i + 1)}, 100*(i+1))
		b := alloc()
		copy(b.Mem, data)
		if err := ul.Queue(b, len(data), mhi.EOT); err != nil {
			t.Fatal(err)
		}
		ul.Ring()
		return data
	}
	waitPosted := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for mhi.PendingEventsForTest(er) < n {
			if time.Now().After(deadline) {
				t.Fatalf("the device posted %d events, want %d", mhi.PendingEventsForTest(er), n)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	var sent [][]byte
	for i := range 3 {
		sent = append(sent, send(i))
	}
	// Three UL and three DL completions are in the event ring, not yet
	// consumed, when the channels stop.
	waitPosted(6)
	if err := ul.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dl.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	poll()
	if len(ulDone) != 3 || len(dlDone) != 3 {
		t.Errorf("after STOP the posted completions completed %d UL and %d DL buffers, want 3 and 3", len(ulDone), len(dlDone))
	}
	for _, ch := range []*mhi.Channel{ul, dl} {
		if err := ch.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 3; i < transfers; i++ {
		sent = append(sent, send(i))
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(ulDone) < transfers || len(dlDone) < transfers {
		if time.Now().After(deadline) {
			t.Fatalf("completed %d UL and %d DL buffers, want %d each", len(ulDone), len(dlDone), transfers)
		}
		poll()
		time.Sleep(100 * time.Microsecond)
	}
	poll()
	for _, list := range [][]done{ulDone, dlDone} {
		seen := map[*pci.Buffer]bool{}
		for _, d := range list {
			if seen[d.buf] {
				t.Errorf("buffer %#x completed twice", d.buf.IOVA)
			}
			seen[d.buf] = true
		}
	}
	if len(ulDone) != transfers || len(dlDone) != transfers {
		t.Fatalf("completed %d UL and %d DL buffers, want %d each", len(ulDone), len(dlDone), transfers)
	}
	for i := range transfers {
		if ulDone[i].n != len(sent[i]) {
			t.Errorf("UL completion %d: %d bytes, want %d", i, ulDone[i].n, len(sent[i]))
		}
		if !bytes.Equal(dlData[i], sent[i]) {
			t.Errorf("DL completion %d: %d bytes, want %d bytes of %d", i, len(dlData[i]), len(sent[i]), i+1)
		}
	}
	if s := er.Stats(); s.Invalid != 0 {
		t.Errorf("%d invalid events", s.Invalid)
	}
}

// TestSuspendWithULTransfersPendingIsBusyAndStaysInM0: like Linux
// mhi_pm_suspend's -EBUSY, M3 is refused while the device holds UL
// transfers it has not completed.
func TestSuspendWithULTransfersPendingIsBusyAndStaysInM0(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	// No DL buffers: the loopback echoes the first transfer into its DL
	// queue and then leaves UL transfers in the ring until the host
	// posts DL buffers.
	l := newLoop(r, "LOOPBACK", 4096, 0, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if err := l.send(ctx, []byte{byte(i), 1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "the loopback to hold UL", func() bool { return l.ul.Outstanding() == 2 })
	err := r.c.Suspend(ctx)
	if !errors.Is(err, mhi.ErrBusy) || !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("Suspend with UL pending = %v, want ErrBusy (EBUSY)", err)
	}
	if st, _ := r.m.State(); st != mhi.StateM0 {
		t.Errorf("device in %s after a refused suspend, want M0", st)
	}
	if st, _, _ := r.c.State(); st != mhi.StateM0 {
		t.Errorf("host view %s after a refused suspend, want M0", st)
	}
	// Traffic still flows: DL buffers release the loopback.
	b := make([]*pci.Buffer, 0, 4)
	for range 4 {
		buf, err := r.dev.DMA().Alloc(4096, 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.dev.DMA().Free(buf) })
		b = append(b, buf)
	}
	l.mu.Lock()
	l.rxFree = append(l.rxFree, b...)
	l.bufLen = 4096
	l.mu.Unlock()
	l.refill()
	for i := range 3 {
		got, err := l.recv(5 * time.Second)
		if err != nil || len(got) != 4 || got[0] != byte(i) {
			t.Fatalf("transfer %d after the refused suspend: %v, %v", i, got, err)
		}
	}
	waitFor(t, 5*time.Second, "UL completions", func() bool { return l.ul.Outstanding() == 0 })
	if err := r.c.Suspend(ctx); err != nil {
		t.Fatalf("Suspend with nothing pending: %v", err)
	}
	if err := r.c.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	// Back in M0 (and done re-ringing) before the channels are reset.
	l.exchange(t, rand.New(rand.NewPCG(25, 26)), 5, 4096)
}

// sblRig powers a qcom-qdu100 up from PBL into an SBL that stays there
// (SAHARA's environment) with a loopback behind SAHARA. Power-up runs in
// the background, waiting for a mission mode that never comes; the test
// ends it.
func sblRig(t *testing.T) *rig {
	t.Helper()
	r, errc, cancel := startInSBL(t)
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err == nil {
			t.Error("PowerUp reached mission mode in a modem that stays in the SBL")
		}
	})
	return r
}

// startInSBL is sblRig without the clean-up: the caller gets PowerUp's
// result (once the modem leaves the SBL, sim.Modem.LeaveSBL, or cancel
// is called).
func startInSBL(t *testing.T) (*rig, <-chan error, context.CancelFunc) {
	t.Helper()
	// QDU100 itself has no M3 (no-m3); TestM0ReRingsChannelsQueuedInM3InTheSBL
	// suspends this one.
	p := *profile(t, "qcom-qdu100")
	p.NoM3 = false
	r := newRigProfile(t, &p,
		sim.Options{Boot: sim.BootPBL, StayInSBL: true, Functions: map[string]sim.Function{"SAHARA": &sim.Loopback{}}},
		mhi.Options{Firmware: func(string) ([]byte, error) { return []byte("sbl image"), nil }})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.c.PowerUp(ctx) }()
	waitFor(t, 10*time.Second, "M0 in the SBL", func() bool {
		st, ee, _ := r.c.State()
		return st == mhi.StateM0 && ee == mhi.EESBL
	})
	return r, errc, cancel
}

// TestSBLChannelStartsBeforeMissionMode: SAHARA runs in the SBL, before
// mission mode (Linux creates the SBL's channel devices at the SBL
// transition); AMSS channels are still refused there.
func TestSBLChannelStartsBeforeMissionMode(t *testing.T) {
	r := sblRig(t)
	l := newLoop(r, "SAHARA", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(21, 22)), 20, 4096)
	lb, err := r.c.Channel(0, mhi.ChannelOptions{}) // LOOPBACK: AMSS only
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.Start(context.Background()); !errors.Is(err, mhi.ErrState) {
		t.Errorf("starting LOOPBACK in the SBL = %v, want ErrState", err)
	}
}

// TestM0ReRingsChannelsQueuedInM3InTheSBL: TREs queued while suspended
// are rung at M0 in any EE (Linux mhi_pm_m0_transition), not only in
// mission mode.
func TestM0ReRingsChannelsQueuedInM3InTheSBL(t *testing.T) {
	r := sblRig(t)
	l := newLoop(r, "SAHARA", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(23, 24)), 5, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitFor(t, 5*time.Second, "UL completions", func() bool { return l.ul.Outstanding() == 0 })
	if err := r.c.Suspend(ctx); err != nil {
		t.Fatalf("Suspend in the SBL: %v", err)
	}
	if err := l.send(ctx, []byte("queued in M3 in the SBL")); err != nil {
		t.Fatal(err)
	}
	if err := r.c.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	got, err := l.recv(3 * time.Second)
	if err != nil || string(got) != "queued in M3 in the SBL" {
		t.Fatalf("after resume in the SBL: %q, %v (the TRE queued in M3 was not rung at M0)", got, err)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// TestSuspendRacingDoorbellsRingsNoneInM3: a TX or refill doorbell whose
// check saw M0 must not land after MHICTRL = M3 (§4.6). Traffic flows
// both ways while the host suspends and resumes over and over; the strict
// modem fails the test on any doorbell it sees in M3.
func TestSuspendRacingDoorbellsRingsNoneInM3(t *testing.T) {
	r := newRig(t, "foxconn-t99w175", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 2048, 16, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		payload := []byte("racing the suspend")
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := l.send(ctx, payload); err != nil {
				done <- err
				return
			}
			// Drain what came back so the loopback never stalls.
			for drained := false; !drained; {
				select {
				case <-l.got:
				default:
					drained = true
				}
			}
		}
	}()
	cycles := 0
	for cycles < 150 && ctx.Err() == nil {
		err := r.c.Suspend(ctx)
		if errors.Is(err, mhi.ErrBusy) {
			runtime.Gosched()
			continue
		}
		if err != nil {
			t.Fatalf("Suspend (cycle %d): %v", cycles, err)
		}
		if err := r.c.Resume(ctx); err != nil {
			t.Fatalf("Resume (cycle %d): %v", cycles, err)
		}
		cycles++
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("sender: %v", err)
	}
	if cycles < 150 {
		t.Fatalf("only %d suspend cycles before %v", cycles, ctx.Err())
	}
}
