package link

import (
	"fmt"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link/framing"
)

// Sessions: an MBIM modem carries several IP sessions (one NDP per
// session in an NTB, docs/FRAMING.md §3.2) and a QMAP modem several mux
// IDs (docs/FRAMING.md §4.1) over one channel pair. The Endpoint owns the pair and is the
// demultiplexer: packets of its own session (Options.Session) take the
// single-session path unchanged (GRO, no lookup beyond one compare);
// packets of other sessions go to the SessionEndpoints made with
// NewSessionEndpoint, and writes of a SessionEndpoint are framed with its ID on the
// shared UL channel. Packets for a session nobody serves are dropped and
// counted (RXDrops.Session), as the kernel drops an unknown session.

// SessionEndpoint is a stack.LinkEndpoint for one more session (MBIM session ID
// or QMAP mux ID) on an Endpoint's channel pair. It has no goroutines:
// the Endpoint's poller delivers its packets (without GRO) and its writes
// use the Endpoint's TX path. Create it with Endpoint.NewSessionEndpoint and give
// it to a gVisor stack like any link endpoint.
type SessionEndpoint struct {
	e       *Endpoint
	id      uint8
	mtu     atomic.Uint32
	disp    atomic.Pointer[stack.NetworkDispatcher]
	closed  atomic.Bool
	onClose atomic.Pointer[func()]

	rxPackets, rxBytes, rxNotAttached atomic.Uint64
}

var _ stack.LinkEndpoint = (*SessionEndpoint)(nil)

// NewSessionEndpoint returns the endpoint for session id on e's channel pair. It
// fails for e's own session, for an ID already served, for a framing
// without sessions (raw IP), and after Close.
func (e *Endpoint) NewSessionEndpoint(id uint8) (*SessionEndpoint, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if id == e.session {
		return nil, fmt.Errorf("link: session %d is the endpoint's own", id)
	}
	if _, ok := e.tx.enc.(framing.SessionEncoder); !ok {
		return nil, fmt.Errorf("link: framing %s has no sessions", e.framing.Name())
	}
	if err := checkSession(e.framing, id); err != nil {
		return nil, err
	}
	s := &SessionEndpoint{e: e, id: id}
	s.mtu.Store(e.MTU())
	if !e.sessions[id].CompareAndSwap(nil, s) {
		return nil, fmt.Errorf("link: session %d already has an endpoint", id)
	}
	return s, nil
}

// checkSession refuses a session f cannot carry (framing.SessionLimit):
// its packets could never arrive, and those that decode to its ID are
// another session's sent with the wrong offset.
func checkSession(f framing.Framing, id uint8) error {
	if l, ok := f.(framing.SessionLimit); ok && int(id) >= l.Sessions() {
		return fmt.Errorf("link: framing %s carries sessions 0 to %d, not %d", f.Name(), l.Sessions()-1, id)
	}
	return nil
}

// deliverSession hands a packet of another session to its endpoint (on
// the poller).
func (e *Endpoint) deliverSession(id uint8, p []byte, devCsum bool) {
	s := e.sessions[id].Load()
	if s == nil {
		e.pass.dropSession++
		return
	}
	e.deliverPacket(p, devCsum, s)
}

// deliver runs on the poller with a packet it built for s.
func (s *SessionEndpoint) deliver(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	d := s.disp.Load()
	if d == nil {
		s.rxNotAttached.Add(1)
		s.e.pass.dropNoAtt++
		return
	}
	s.rxPackets.Add(1)
	s.rxBytes.Add(uint64(pkt.Size()))
	(*d).DeliverNetworkPacket(proto, pkt)
}

// control handles an in-band control frame on the poller: it is counted
// and, if the framing answers it (QMAP flow control, docs/FRAMING.md §4.2), the answer is
// queued on UL at once.
func (e *Endpoint) control(frame []byte) {
	e.pass.control++
	c, ok := e.framing.(framing.Controller)
	if !ok {
		return
	}
	e.lifeMu.RLock()
	defer e.lifeMu.RUnlock()
	t := &e.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.closed.Load() {
		return
	}
	var (
		deadline time.Time
		err      tcpip.Error
		held     bool
	)
	buf := e.getTXBuffer(&deadline, &err, &held)
	if buf == nil {
		return
	}
	n := c.Answer(frame, buf.Mem[:t.size])
	if n <= 0 || n > t.size || e.queueFrame(buf, n, 0, &deadline) != nil {
		t.put(buf)
		return
	}
	e.stats.controlAnswers.Add(1)
	e.ringUL()
}

// ID returns the session's ID (MBIM session, QMAP mux ID).
func (s *SessionEndpoint) ID() uint8 { return s.id }

// Endpoint returns the endpoint that owns the channel pair.
func (s *SessionEndpoint) Endpoint() *Endpoint { return s.e }

// Received returns the packets and bytes delivered to this session, and
// those dropped because nothing was attached.
func (s *SessionEndpoint) Received() (pkts, bytes, notAttached uint64) {
	return s.rxPackets.Load(), s.rxBytes.Load(), s.rxNotAttached.Load()
}

// WritePackets implements stack.LinkWriter: the packets are framed with
// the session's ID on the shared UL channel (Endpoint.WritePackets).
func (s *SessionEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	if s.closed.Load() {
		return 0, &tcpip.ErrClosedForSend{}
	}
	return s.e.writePackets(pkts, s.id, false)
}

// WritePacketsKept is WritePackets for a caller that keeps what the link
// does not take (Endpoint.WritePacketsKept).
func (s *SessionEndpoint) WritePacketsKept(pkts stack.PacketBufferList) (int, tcpip.Error) {
	if s.closed.Load() {
		s.e.stats.txClosed.Add(uint64(pkts.Len()))
		return 0, &tcpip.ErrClosedForSend{}
	}
	return s.e.writePackets(pkts, s.id, true)
}

// MTU implements stack.LinkEndpoint.
func (s *SessionEndpoint) MTU() uint32 { return s.mtu.Load() }

// SetMTU implements stack.LinkEndpoint, capped like the Endpoint's.
func (s *SessionEndpoint) SetMTU(mtu uint32) { s.mtu.Store(min(mtu, uint32(s.e.tx.maxPacket))) }

// MaxHeaderLength implements stack.LinkEndpoint.
func (s *SessionEndpoint) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: raw IP has none.
func (s *SessionEndpoint) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint (ignored).
func (s *SessionEndpoint) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint: the Endpoint validates RX
// checksums for every session.
func (s *SessionEndpoint) Capabilities() stack.LinkEndpointCapabilities { return s.e.Capabilities() }

// Attach implements stack.LinkEndpoint; nil detaches (packets are then
// dropped and counted).
func (s *SessionEndpoint) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		s.disp.Store(nil)
		return
	}
	s.disp.Store(&d)
}

// IsAttached implements stack.LinkEndpoint.
func (s *SessionEndpoint) IsAttached() bool { return s.disp.Load() != nil }

// Wait implements stack.LinkEndpoint: a SessionEndpoint has no goroutines.
func (s *SessionEndpoint) Wait() {}

// ARPHardwareType implements stack.LinkEndpoint.
func (s *SessionEndpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint (framing is added on copy).
func (s *SessionEndpoint) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint.
func (s *SessionEndpoint) ParseHeader(*stack.PacketBuffer) bool { return true }

// SetOnCloseAction implements stack.LinkEndpoint.
func (s *SessionEndpoint) SetOnCloseAction(fn func()) { s.onClose.Store(&fn) }

// Close implements stack.LinkEndpoint: the session stops receiving (its
// packets are then dropped as an unknown session) and sending. The
// Endpoint and its other sessions are unaffected; closing the Endpoint
// does not close its Sessions' stacks, but their writes fail from then on.
func (s *SessionEndpoint) Close() {
	if !s.closed.CompareAndSwap(false, true) {
		return
	}
	if fn := s.onClose.Load(); fn != nil && *fn != nil {
		(*fn)()
	}
	s.disp.Store(nil)
	s.e.sessions[s.id].CompareAndSwap(s, nil)
}
