package linktest_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/linktest"
	"github.com/mhistack/mhistack/mhi/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter is a NetworkDispatcher that counts the packets it gets.
type counter struct{ n atomic.Int64 }

func (c *counter) DeliverNetworkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) { c.n.Add(1) }
func (c *counter) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer)    {}

// ipv4 is a minimal IPv4 packet (no payload) the endpoint accepts.
func ipv4() []byte {
	b := make([]byte, header.IPv4MinimumSize)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: 253,
		SrcAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 1}), DstAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 2})})
	ip.SetChecksum(^ip.CalculateChecksum())
	return b
}

// An endpoint on IP_HW0 with a loopback behind it: a packet written on
// UL comes back on DL.
func ExampleStart() {
	r, err := linktest.Start(linktest.Options{Function: &sim.Loopback{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	var got counter
	r.Endpoint.Attach(&got)
	var pkts stack.PacketBufferList
	pkts.PushBack(stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(ipv4())}))
	n, werr := r.Endpoint.WritePackets(pkts)
	pkts.DecRef()
	fmt.Println("written:", n, werr)
	for deadline := time.Now().Add(10 * time.Second); got.n.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("looped back:", got.n.Load())
	// Output:
	// written: 1 <nil>
	// looped back: 1
}

// The rig of a test closes in the test's cleanup; Close after it returns
// what the cleanup's did.
func TestNewClosesInCleanup(t *testing.T) {
	var r *linktest.Rig
	t.Run("rig", func(t *testing.T) {
		r = linktest.New(t, linktest.Options{Link: link.Options{Channel: "IP_HW0"}})
		if r.Endpoint.MTU() == 0 {
			t.Fatal("endpoint has no MTU")
		}
	})
	if err := r.Close(); err != nil {
		t.Fatalf("Close after cleanup = %v", err)
	}
}
