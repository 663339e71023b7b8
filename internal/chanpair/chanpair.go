// Package chanpair joins two gVisor channel.Endpoints back to back, the
// way wireguard-go's tun/netstack connects a gVisor stack to a TUN
// device: a goroutine per direction reads each outbound packet of one
// endpoint and injects a copy of it as an inbound packet of the other.
// It is the baseline the benchmarks (stack's and hack/bench's) compare
// mhistack's link against.
package chanpair

import (
	"context"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Pair is two channel.Endpoints, A and B, whose outbound packets become
// the other's inbound ones.
type Pair struct {
	A, B *channel.Endpoint

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a running pair of endpoints with queues of queueLen packets
// and the given MTU (no GSO, no link address). Close stops its pumps.
func New(queueLen int, mtu uint32) *Pair {
	p := &Pair{A: channel.New(queueLen, mtu, ""), B: channel.New(queueLen, mtu, "")}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(2)
	go p.pump(ctx, p.A, p.B)
	go p.pump(ctx, p.B, p.A)
	return p
}

// pump turns from's outbound packets into to's inbound ones by copy, as
// wireguard-go's tun does through its TUN reads and writes.
func (p *Pair) pump(ctx context.Context, from, to *channel.Endpoint) {
	defer p.wg.Done()
	for {
		pkt := from.ReadContext(ctx)
		if pkt == nil {
			return
		}
		np := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: pkt.ToBuffer()})
		proto := pkt.NetworkProtocolNumber
		pkt.DecRef()
		to.InjectInbound(proto, np)
		np.DecRef()
	}
}

// Close stops both pumps and waits for them. Call it before closing the
// stacks on the endpoints: a delivery in progress needs the stack.
func (p *Pair) Close() {
	p.cancel()
	p.wg.Wait()
}
