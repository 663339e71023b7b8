package link_test

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/simnet"
)

// TestManyConcurrentWritersOnAFullULRingKeepEveryFrameValid: 64 goroutines
// write at once, far more than the UL ring holds, so that writers keep
// waiting for space (releasing the TX lock) and reaping completions while
// others queue frames. The strict modem parses every UL transfer (a
// malformed frame or a protocol violation fails the test) and every packet
// must arrive intact, each writer's in its order. Run with -race: this is
// the TX path under the concurrency of a stack with many connections.
func TestManyConcurrentWritersOnAFullULRingKeepEveryFrameValid(t *testing.T) {
	cases := append([]framingCase{{name: "raw-ip", profile: "qcom-sdx55m", channel: "IP_HW0", sim: framing.RawIP{}, link: framing.RawIP{}}},
		framingCases()...)
	for _, fc := range cases {
		t.Run(fc.name, func(t *testing.T) {
			col := &ulCollector{}
			net := &simnet.PacketNet{Framing: fc.sim, OnPacket: col.add}
			r := newRig(t, rigOptions{profile: fc.profile, fn: net, link: link.Options{
				Channel: fc.channel, Framing: fc.link, Session: fc.session, TXBufferSize: fc.txBuf,
			}})
			waitRunning(t, net)
			const writers, perWriter, batch = 64, 150, 8
			sent := make([][][]byte, writers)
			var wg sync.WaitGroup
			for w := range writers {
				rng := rand.New(rand.NewPCG(uint64(w), 11))
				pkts, _ := mixed(t, rng, perWriter, 1400)
				for i, p := range pkts {
					// The last two bytes name the writer and
					// the packet, so that order can be checked per
					// writer at the modem.
					p[len(p)-1], p[len(p)-2] = byte(w), byte(i)
				}
				sent[w] = pkts
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < len(pkts); i += batch {
						write(t, r.ep, pkts[i:min(i+batch, len(pkts))]...)
					}
				}()
			}
			wg.Wait()
			got, _ := col.wait(t, writers*perWriter)
			if net.Malformed.Load() != 0 {
				t.Fatalf("%d malformed UL frames", net.Malformed.Load())
			}
			next := make([]int, writers)
			for _, p := range got {
				w := -1
				for c := range sent {
					if i := next[c]; i < len(sent[c]) && bytes.Equal(p, sent[c][i]) {
						w = c
						break
					}
				}
				if w < 0 {
					t.Fatalf("UL packet of %d bytes is nobody's next packet (corrupted, duplicated or out of order)", len(p))
				}
				next[w]++
			}
			if st := r.ep.Stats(); st.TXFull == 0 {
				t.Logf("the UL ring never filled (%+v): the test did not exercise the waits", st)
			}
		})
	}
}
