package simnet

import (
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestCarrierCountsPacketsSentWhileThePairIsStopped: DL packets the
// carrier's stack writes while the data pair is stopped (before Start,
// after Stop) are lost and counted in Dropped, on raw IP and framed pairs.
func TestCarrierCountsPacketsSentWhileThePairIsStopped(t *testing.T) {
	for _, f := range []framing.Framing{nil, qmap.Framing{Version: 1}} {
		cn, err := NewCarrierNetwork(CarrierOptions{Framing: f})
		if err != nil {
			t.Fatal(err)
		}
		write := func(n int) {
			var l stack.PacketBufferList
			for range n {
				l.PushBack(stack.NewPacketBuffer(stack.PacketBufferOptions{
					Payload: buffer.MakeWithData(make([]byte, 40)),
				}))
			}
			if k, err := cn.ep.WritePackets(l); k != 0 || err == nil {
				t.Errorf("%v: WritePackets on a stopped pair: %d, %v", f, k, err)
			}
			l.DecRef()
		}
		write(3)
		cn.Start(&sim.Port{})
		cn.Stop()
		write(2)
		if got := cn.Stats().Dropped; got != 5 {
			t.Errorf("%v: Dropped %d, want 5", f, got)
		}
		cn.Close()
	}
}
