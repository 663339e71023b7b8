package chanpair

import (
	"testing"
	"time"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// recorder is a NetworkDispatcher that hands each delivered packet's
// bytes to a channel.
type recorder struct{ got chan []byte }

func (r *recorder) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	r.got <- pkt.ToView().ToSlice()
}
func (r *recorder) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// A packet written on one endpoint arrives, as a copy, at the other, in
// both directions; Close stops both pumps.
func TestPacketsCrossThePairAndCloseStopsThePumps(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := New(4, 1500)
	defer p.Close()
	for _, dir := range []struct {
		name     string
		from, to interface {
			Attach(stack.NetworkDispatcher)
			WritePackets(stack.PacketBufferList) (int, tcpip.Error)
		}
	}{{"A to B", p.A, p.B}, {"B to A", p.B, p.A}} {
		r := &recorder{got: make(chan []byte, 1)}
		dir.to.Attach(r)
		want := []byte{0x45, 1, 2, 3, 4, 5}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(want)})
		pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
		var l stack.PacketBufferList
		l.PushBack(pkt)
		if n, err := dir.from.WritePackets(l); n != 1 || err != nil {
			t.Fatalf("%s: WritePackets = %d, %v", dir.name, n, err)
		}
		pkt.DecRef()
		select {
		case got := <-r.got:
			if string(got) != string(want) {
				t.Errorf("%s: got % x, want % x", dir.name, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing delivered", dir.name)
		}
	}
	p.Close()
}
