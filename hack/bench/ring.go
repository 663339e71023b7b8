package main

import (
	"sync"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
)

// ringEndpoint is one end of table 5's ideal ring: two gVisor stacks
// joined by an in-memory ring, with what a modem link could at best
// offer and nothing of a modem. TX takes gVisor GSO batches (the stack
// segments, the endpoint copies each segment once into the ring, as a DMA
// copy would), RX drains the whole ring per wake-up and hands it to
// gVisor's GRO, flushed once per batch, with RX checksum offload (no
// validation at all). A full ring blocks the writer (backpressure, no
// drops).
type ringEndpoint struct {
	peer *ringEndpoint
	mtu  uint32

	mu     sync.Mutex
	cond   sync.Cond // signalled when q gains packets or room, or on close
	q      []ringPkt
	closed bool

	disp stack.NetworkDispatcher
	gro  gro.GRO
	done chan struct{}
}

type ringPkt struct {
	proto tcpip.NetworkProtocolNumber
	b     buffer.Buffer
}

// ringSize is the ring's capacity in packets (the modem's rings hold 127).
const ringSize = 256

// newRingPair returns two connected endpoints; each runs its RX goroutine
// from Attach until Close.
func newRingPair(mtu uint32) (*ringEndpoint, *ringEndpoint) {
	a, b := &ringEndpoint{mtu: mtu}, &ringEndpoint{mtu: mtu}
	a.peer, b.peer = b, a
	for _, e := range []*ringEndpoint{a, b} {
		e.cond.L = &e.mu
		e.gro.Init(true)
	}
	return a, b
}

func (e *ringEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	p := e.peer
	n := 0
	for _, pkt := range pkts.AsSlice() {
		// The one copy: out of the stack's buffer into the ring's.
		v := pkt.ToView()
		b := buffer.MakeWithView(buffer.NewViewWithData(v.AsSlice()))
		v.Release()
		p.mu.Lock()
		for len(p.q) >= ringSize && !p.closed {
			p.cond.Wait()
		}
		if p.closed {
			p.mu.Unlock()
			b.Release()
			return n, &tcpip.ErrClosedForSend{}
		}
		p.q = append(p.q, ringPkt{pkt.NetworkProtocolNumber, b})
		if len(p.q) == 1 {
			p.cond.Broadcast()
		}
		p.mu.Unlock()
		n++
	}
	return n, nil
}

// rx drains the ring in batches: every packet through GRO, one flush per
// batch (link.Endpoint's poll pass does the same).
func (e *ringEndpoint) rx() {
	defer close(e.done)
	var batch []ringPkt
	for {
		e.mu.Lock()
		for len(e.q) == 0 && !e.closed {
			e.cond.Wait()
		}
		if e.closed {
			for _, p := range e.q {
				p.b.Release()
			}
			e.q = nil
			e.mu.Unlock()
			return
		}
		batch, e.q = e.q, batch[:0]
		e.cond.Broadcast() // room for writers
		e.mu.Unlock()
		for i, p := range batch {
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: p.b})
			pkt.NetworkProtocolNumber = p.proto
			pkt.RXChecksumValidated = true
			e.gro.Enqueue(pkt)
			pkt.DecRef()
			batch[i] = ringPkt{}
		}
		// gro.GRO.Flush at the pinned gVisor delivers one packet per
		// bucket per call (see link's flushGRO); a bucket holds at most 8.
		for range 9 {
			e.gro.Flush()
		}
	}
}

func (e *ringEndpoint) Attach(d stack.NetworkDispatcher) {
	e.mu.Lock()
	if d == nil {
		e.mu.Unlock()
		return
	}
	start := e.disp == nil
	e.disp = d
	e.gro.Dispatcher = d
	if start {
		e.done = make(chan struct{})
	}
	e.mu.Unlock()
	if start {
		go e.rx()
	}
}

func (e *ringEndpoint) Close() {
	e.mu.Lock()
	e.closed = true
	e.cond.Broadcast()
	e.mu.Unlock()
}

func (e *ringEndpoint) Wait() {
	if e.done != nil {
		<-e.done
	}
}

func (e *ringEndpoint) IsAttached() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.disp != nil
}

func (e *ringEndpoint) MTU() uint32                             { return e.mtu }
func (e *ringEndpoint) SetMTU(mtu uint32)                       { e.mtu = mtu }
func (e *ringEndpoint) MaxHeaderLength() uint16                 { return 0 }
func (e *ringEndpoint) LinkAddress() tcpip.LinkAddress          { return "" }
func (e *ringEndpoint) SetLinkAddress(tcpip.LinkAddress)        {}
func (e *ringEndpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (e *ringEndpoint) AddHeader(*stack.PacketBuffer)           {}
func (e *ringEndpoint) ParseHeader(*stack.PacketBuffer) bool    { return true }
func (e *ringEndpoint) SetOnCloseAction(func())                 {}
func (e *ringEndpoint) GSOMaxSize() uint32                      { return stack.GVisorGSOMaxSize }
func (e *ringEndpoint) SupportedGSO() stack.SupportedGSO        { return stack.GVisorGSOSupported }
func (e *ringEndpoint) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload | stack.CapabilityTXChecksumOffload
}

var (
	_ stack.LinkEndpoint = (*ringEndpoint)(nil)
	_ stack.GSOEndpoint  = (*ringEndpoint)(nil)
)
