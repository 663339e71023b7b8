package link_test

import (
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/sim"
)

// The UL frames on the ring when a SYS_ERR comes were never sent; the
// endpoint queues them again once the channel is back, so none is lost
// (before, every frame the device had not taken yet was dropped, and a
// TCP peer waited a retransmission timeout for ACKs the host had sent).
// Every frame must reach the modem's function. (Not necessarily come back:
// the echo of a frame the modem took just before it crashed can be lost
// on DL, queued in the modem for want of a DL buffer or completed on a
// ring the host has stopped reading: the device's loss, not the host's.
// The race soak saw 99 of 100 echoes come back.)
func TestULFramesOnTheRingAtSysErrAreSentAfterRecovery(t *testing.T) {
	// The modem must still hold frames when the SYS_ERR comes. A test
	// goroutine descheduled for longer than the slow modem takes for the
	// whole ring (a loaded CI machine) finds it empty: that attempt
	// proves nothing, and the scenario runs again on a new rig.
	for attempt := 1; ; attempt++ {
		if ulFramesAtSysErr(t) {
			return
		}
		if attempt == 5 {
			t.Fatal("in 5 attempts the SYS_ERR always found the UL ring empty: the test proves nothing")
		}
		t.Logf("attempt %d: the modem took every frame before the SYS_ERR; again", attempt)
	}
}

// ulFramesAtSysErr runs TestULFramesOnTheRingAtSysErrAreSentAfterRecovery's
// scenario once on a rig of its own; false if the SYS_ERR found no frame
// left to queue again.
func ulFramesAtSysErr(t *testing.T) bool {
	fn := &recordingLoopback{}
	r := newRig(t, rigOptions{fn: fn, link: link.Options{NoGRO: true}})
	defer r.close()
	ul, _ := r.ep.Channels()
	// A slow modem (2 ms per TRE) takes at most 64 UL transfers per pass
	// and answers the SYS_ERR request between passes: of 100 frames, the
	// last are still on the ring when it fails.
	const n = 100
	pkts := make([][]byte, n)
	want := map[string]bool{}
	for i := range pkts {
		pkts[i] = udp4(t, i+1, 200)
		want[string(pkts[i])] = true
	}
	r.m.SetSlow(2 * time.Millisecond)
	write(t, r.ep, pkts...)
	left := ul.Outstanding()
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	r.m.SetSlow(0)
	waitUntil(t, 10*time.Second, "recovery", func() bool { return r.c.Stats().Recoveries == 1 })
	deadline := time.Now().Add(5 * time.Second)
	for distinct(fn.received(), want) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := r.ep.Stats()
	if got := distinct(fn.received(), want); got != n {
		t.Fatalf("%d of %d frames reached the modem (%d came back); %d were on the UL ring when the SYS_ERR was requested, %d queued again after recovery",
			got, n, distinct(r.snk.packets(), want), left, st.TXRequeued)
	}
	if st.TXRequeued == 0 {
		return false
	}
	t.Logf("%d frames on the UL ring when the SYS_ERR was requested, %d queued again after recovery", left, st.TXRequeued)
	waitUntil(t, 5*time.Second, "TX buffers home", func() bool {
		_, _, tx, txAll := link.BuffersHomeForTest(r.ep)
		return tx == txAll
	})
	return true
}

// recordingLoopback is a sim.Loopback that keeps a copy of every UL
// transfer it receives.
type recordingLoopback struct {
	sim.Loopback
	mu  sync.Mutex
	got [][]byte
}

func (l *recordingLoopback) Receive(td []byte) {
	l.mu.Lock()
	l.got = append(l.got, append([]byte(nil), td...))
	l.mu.Unlock()
	l.Loopback.Receive(td)
}

func (l *recordingLoopback) received() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.got...)
}

func distinct(got [][]byte, want map[string]bool) int {
	seen := map[string]bool{}
	for _, p := range got {
		if want[string(p)] {
			seen[string(p)] = true
		}
	}
	return len(seen)
}

// The UL frames written while a SYS_ERR is being recovered are held and
// sent after recovery, after those the SYS_ERR took off the ring and in
// the order they were written. Before, each was dropped at once
// (TXDrops.LinkDown), and a TCP sender whose window opened during the
// fault lost its tail: only a retransmission timeout repaired it.
func TestULFramesWrittenDuringSysErrAreSentAfterRecovery(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true}})
	const n = 40
	pkts := make([][]byte, n)
	want := map[string]bool{}
	for i := range pkts {
		pkts[i] = udp4(t, i+1, 200)
		want[string(pkts[i])] = true
	}
	// The modem leaves its command ring alone: recovery waits for the
	// START_CHAN completions, so the SYS_ERR lasts until the test says.
	r.m.HoldCommands(true)
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the SYS_ERR hold", func() bool { return link.HoldingTXForTest(r.ep) })
	write(t, r.ep, pkts...)
	st := r.ep.Stats()
	if st.TXDrops.LinkDown != 0 || st.TXHeld != n {
		t.Errorf("during the SYS_ERR: %d frames held, %d dropped as link down; want %d and 0", st.TXHeld, st.TXDrops.LinkDown, n)
	}
	r.m.HoldCommands(false)
	waitUntil(t, 10*time.Second, "recovery", func() bool { return r.c.Stats().Recoveries == 1 })
	deadline := time.Now().Add(5 * time.Second)
	for distinct(r.snk.packets(), want) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st = r.ep.Stats()
	if got := distinct(r.snk.packets(), want); got != n {
		t.Fatalf("%d of %d frames written during the SYS_ERR came back (held %d, dropped as link down %d, held and dropped %d)",
			got, n, st.TXHeld, st.TXDrops.LinkDown, st.TXDrops.Held)
	}
	checkOrder(t, r.snk.packets(), pkts)
	waitUntil(t, 5*time.Second, "TX buffers home", func() bool {
		_, _, tx, txAll := link.BuffersHomeForTest(r.ep)
		return tx == txAll
	})
}

// PauseTX holds what is written until ResumeTX: ResumeTX(true) sends it
// in order, ResumeTX(false) drops it, and writes that find the TX pool
// held fail at once (no TXTimeout wait: no completion can free a buffer).
func TestPauseTXHoldsFramesUntilResume(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true, TXTimeout: 10 * time.Second}})
	pkts := make([][]byte, 30)
	for i := range pkts {
		pkts[i] = udp4(t, i+1, 200)
	}
	r.ep.PauseTX()
	write(t, r.ep, pkts...)
	if got := r.snk.count(); got != 0 {
		t.Fatalf("%d packets came back while TX was paused", got)
	}
	if st := r.ep.Stats(); st.TXHeld != uint64(len(pkts)) {
		t.Fatalf("TXHeld %d, want %d", st.TXHeld, len(pkts))
	}
	r.ep.ResumeTX(true)
	checkOrder(t, r.snk.waitFor(t, len(pkts), 10*time.Second), pkts)

	// Dropped on ResumeTX(false), and the pool is bounded.
	r.ep.PauseTX()
	_, _, _, pool := link.BuffersHomeForTest(r.ep)
	more := make([][]byte, pool+5)
	for i := range more {
		more[i] = udp4(t, 1000+i, 200)
	}
	start := time.Now()
	n, _ := writeN(r.ep, more...)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a write that found the TX pool held took %v (TXTimeout 10 s): it waited", took)
	}
	st := r.ep.Stats()
	if n != pool || st.TXDrops.Held != 5 {
		t.Errorf("wrote %d of %d with a pool of %d, %d refused; want %d and 5", n, len(more), pool, st.TXDrops.Held, pool)
	}
	r.ep.ResumeTX(false)
	if st := r.ep.Stats(); st.TXDrops.Held != uint64(5+pool) {
		t.Errorf("TXDrops.Held %d after ResumeTX(false), want %d", st.TXDrops.Held, 5+pool)
	}
	if _, _, tx, txAll := link.BuffersHomeForTest(r.ep); tx != txAll {
		t.Errorf("%d of %d TX buffers home after ResumeTX(false)", tx, txAll)
	}
	// Sending works again.
	write(t, r.ep, udp4(t, 9999, 200))
	r.snk.waitFor(t, len(pkts)+1, 10*time.Second)
}

// checkOrder checks that the packets of want appear in got in want's
// order.
func checkOrder(t *testing.T, got, want [][]byte) {
	t.Helper()
	idx := map[string]int{}
	for i, p := range want {
		idx[string(p)] = i
	}
	last := -1
	for _, p := range got {
		i, ok := idx[string(p)]
		if !ok {
			continue
		}
		if i < last {
			t.Fatalf("packet %d came back after packet %d", i, last)
		}
		last = i
	}
}

// With UL aggregation a held frame carries several packets: PauseTX
// holds the frames of a batch, ResumeTX(true) sends every packet in
// order, and ResumeTX(false) counts each dropped packet in TXDrops.Held,
// not each frame (before, a dropped 11-packet frame counted 1).
func TestHeldAggregatedFramesCountTheirPackets(t *testing.T) {
	f := qmap.Framing{Version: 1, MaxDatagrams: 11, MaxBytes: 8192}
	r := newRig(t, rigOptions{profile: "qcom-sdx55m", fn: &sim.Loopback{},
		link: link.Options{Channel: "IP_HW0", Framing: f, NoGRO: true, TXTimeout: 10 * time.Second}})
	pkts := make([][]byte, 30)
	for i := range pkts {
		pkts[i] = udp4(t, i+1, 200)
	}
	r.ep.PauseTX()
	write(t, r.ep, pkts...)
	st := r.ep.Stats()
	if st.TXPackets != 30 || st.TXHeld != 3 {
		t.Fatalf("30 packets paused: %d packets in %d held frames, want 3 frames of ≤ 11", st.TXPackets, st.TXHeld)
	}
	r.ep.ResumeTX(true)
	checkOrder(t, r.snk.waitFor(t, len(pkts), 10*time.Second), pkts)

	r.ep.PauseTX()
	write(t, r.ep, pkts...)
	r.ep.ResumeTX(false)
	if st := r.ep.Stats(); st.TXDrops.Held != 30 || st.TXHeld != 6 {
		t.Errorf("ResumeTX(false) on 30 packets in %d frames: TXDrops.Held %d, want 30", st.TXHeld-3, st.TXDrops.Held)
	}
	if _, _, tx, txAll := link.BuffersHomeForTest(r.ep); tx != txAll {
		t.Errorf("%d of %d TX buffers home after ResumeTX(false)", tx, txAll)
	}
}
