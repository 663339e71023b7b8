package link_test

import (
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi/sim"
)

// The UL frames on the ring when a SYS_ERR comes were never sent; the
// endpoint queues them again once the channel is back, so none is lost
// (before, every frame the device had not taken yet was dropped, and a
// TCP peer waited a retransmission timeout for ACKs the host had sent).
func TestULFramesOnTheRingAtSysErrAreSentAfterRecovery(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true}})
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
	for distinct(r.snk.packets(), want) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := r.ep.Stats()
	if got := distinct(r.snk.packets(), want); got != n {
		t.Fatalf("%d of %d frames came back; %d were on the UL ring when the SYS_ERR was requested, %d queued again after recovery",
			got, n, left, st.TXRequeued)
	}
	if st.TXRequeued == 0 {
		t.Fatalf("the SYS_ERR found the UL ring empty (%d frames on it before): the test proves nothing", left)
	}
	t.Logf("%d frames on the UL ring when the SYS_ERR was requested, %d queued again after recovery", left, st.TXRequeued)
	waitUntil(t, 5*time.Second, "TX buffers home", func() bool {
		_, _, tx, txAll := link.BuffersHomeForTest(r.ep)
		return tx == txAll
	})
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
