package sim

import (
	"runtime"
	"testing"

	"github.com/mhistack/mhistack/mhi"
)

// BenchmarkLoopback measures one UL TD looped back to DL through the modem,
// driven by the raw host: device-side cost per packet, and allocations
// (the modem must not allocate per TRE or event in steady state).
func BenchmarkLoopback(b *testing.B) {
	for _, tc := range []struct {
		name string
		size int
		pair string
		ul   int
		er   int
	}{{"LOOPBACK-1500", 1500, "LOOPBACK", 0, 0}, {"IP_HW0-burst-1500", 1500, "IP_HW0", 100, 2}} {
		b.Run(tc.name, func(b *testing.B) {
			opts := Options{DisableModeration: true}
			if tc.pair == "IP_HW0" {
				opts.Functions = map[string]Function{"IP_HW0": &Loopback{}}
			}
			h := newHost(b, testProfile(), opts)
			h.upToMissionMode()
			ul := h.startChannel(tc.ul)
			dl := h.startChannel(tc.ul + 1)
			tx, rx := h.fill(tc.size, 1), h.alloc(tc.size, 8)
			rings := []int{tc.er}
			if tc.er != 0 {
				rings = append(rings, tc.er+1)
			}
			b.SetBytes(int64(tc.size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				h.queue(dl, rx.IOVA, tc.size, mhi.TREIEOT)
				h.queue(ul, tx.IOVA, tc.size, mhi.TREIEOT)
				// Like the host's poller, look at every ring: a DB_MODE
				// on the UL ring must be answered while waiting for DL.
				gotUL, gotDL := false, false
				for !gotUL || !gotDL {
					for _, r := range rings {
						if ev, ok := h.tryEvent(r); ok && ev.Code() == mhi.CodeEOT {
							gotUL = gotUL || int(ev.Chan()) == tc.ul
							gotDL = gotDL || int(ev.Chan()) == tc.ul+1
						}
					}
					runtime.Gosched()
				}
			}
			b.StopTimer()
			if st := h.m.Stats(); st.DLDrops != 0 || st.PacketsDL < uint64(b.N) {
				b.Errorf("stats %+v", st)
			}
		})
	}
}
