package stack

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/link"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// tap sits between the gVisor NIC and the link endpoint: it copies
// packets to a link.Tap (the pcap writer) while a capture runs. With no capture it costs one atomic load per packet (or
// per GRO batch on RX).
type tap struct {
	nested.Endpoint
	mu   sync.Mutex // serializes CapturePcap and its stop
	pcap atomic.Pointer[link.Tap]
	// clat is the running CLAT (nil: none) and xlat its NIC's link
	// endpoint, which takes the IPv6 packets for the CLAT's address.
	clat atomic.Pointer[clatState]
	xlat atomic.Pointer[clatLink]
	// tails records the TCP segments sent, for the probes after an
	// outage (nil with TCPOptions.NoTailProbe).
	tails *tailTable
	// s reads the Router Advertisements (ra.go); set before the NIC
	// exists.
	s *Stack
}

func newTap(lower gstack.LinkEndpoint) *tap {
	t := &tap{}
	t.Endpoint.Init(lower, t)
	return t
}

// DeliverNetworkPacket implements stack.NetworkDispatcher (RX from the
// link).
func (t *tap) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *gstack.PacketBuffer) {
	if w := t.pcap.Load(); w != nil {
		w.WritePacketBuffer(pkt)
	}
	if t.tails != nil {
		t.tails.received(proto, pkt)
	}
	if proto == header.IPv6ProtocolNumber && t.s != nil && isRouterAdvert(pkt) {
		t.s.routerAdvert(pkt)
		return
	}
	if c := t.clat.Load(); c != nil && proto == header.IPv6ProtocolNumber && t.xlat.Load().deliver(c, pkt) {
		return
	}
	t.Endpoint.DeliverNetworkPacket(proto, pkt)
}

// WritePackets implements stack.LinkWriter (TX to the link).
func (t *tap) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	t.sent(pkts)
	return t.Endpoint.WritePackets(pkts)
}

// sent captures and records packets on their way to the link.
func (t *tap) sent(pkts gstack.PacketBufferList) {
	if w := t.pcap.Load(); w != nil {
		for _, p := range pkts.AsSlice() {
			w.WritePacketBuffer(p)
		}
	}
	if t.tails != nil {
		t.tails.record(pkts.AsSlice())
	}
}

// keptWriter is a link endpoint that leaves the packets it does not take
// to its caller, to offer again (link.Endpoint.WritePacketsKept).
type keptWriter interface {
	WritePacketsKept(gstack.PacketBufferList) (int, tcpip.Error)
}

// writeKept is WritePackets for the transmit queue (txWriter); again says
// the packets were offered before (and captured then). It reports whether
// the link keeps what it does not take: with false, a short count is a
// drop, as for WritePackets.
func (t *tap) writeKept(pkts gstack.PacketBufferList, again bool) (n int, kept bool, err tcpip.Error) {
	if !again {
		t.sent(pkts)
	}
	if k, ok := t.Child().(keptWriter); ok {
		n, err = k.WritePacketsKept(pkts)
		return n, true, err
	}
	n, err = t.Endpoint.WritePackets(pkts)
	return n, false, err
}

// ErrCaptureRunning is returned by CapturePcap while another capture
// runs.
var ErrCaptureRunning = errors.New("stack: a capture is already running")

// CapturePcap writes every packet crossing the link (both directions, as
// the stack sees them: GSO batches before segmentation on TX, GRO merges
// on RX) to w in pcap format (LINKTYPE_RAW), each cut to snapLen bytes
// (0: 65535), until stop is called; it writes nothing to w after stop
// returns. Writes to w happen on the stack's goroutines: a slow w slows
// the stack down. After a write error the capture stops writing; stop
// returns that error, if any, as w returned it. CapturePcap fails with
// ErrCaptureRunning while another capture runs (writing nothing to w) and
// with the error writing the file header.
func (s *Stack) CapturePcap(w io.Writer, snapLen uint32) (stop func() error, err error) {
	t := s.tap
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pcap.Load() != nil {
		return nil, ErrCaptureRunning
	}
	p, err := link.NewTap(w, int(snapLen))
	if err != nil {
		return nil, fmt.Errorf("stack: pcap file header: %w", err)
	}
	t.pcap.Store(p)
	return func() error {
		t.mu.Lock()
		t.pcap.CompareAndSwap(p, nil)
		t.mu.Unlock()
		return p.Stop()
	}, nil
}
