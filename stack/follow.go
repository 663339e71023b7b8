package stack

import (
	"net/netip"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// A removed address takes its TCP connections with it. No segment to it
// can arrive any more (the bearer now routes another address), so a
// connection bound to it would only time out, minutes later; it is
// reset at once instead and its reads and writes fail with
// ECONNABORTED, and a dial in progress from it fails with ECONNABORTED
// too. Android's netd destroys such sockets for the same reason.
// Listeners are left alone: they accept on whatever addresses the stack
// has.

// dialing is a TCP dial in progress; abort is closed when the address it
// dials from is removed.
type dialing struct {
	ep    tcpip.Endpoint
	abort chan struct{}
	once  sync.Once
}

// dialSet tracks the dials in progress.
type dialSet struct {
	mu sync.Mutex
	m  map[*dialing]struct{}
}

func (d *dialSet) add(ep tcpip.Endpoint) *dialing {
	x := &dialing{ep: ep, abort: make(chan struct{})}
	d.mu.Lock()
	if d.m == nil {
		d.m = map[*dialing]struct{}{}
	}
	d.m[x] = struct{}{}
	d.mu.Unlock()
	return x
}

func (d *dialSet) remove(x *dialing) {
	d.mu.Lock()
	delete(d.m, x)
	d.mu.Unlock()
}

// abortFrom aborts the dials whose local address is a.
func (d *dialSet) abortFrom(a tcpip.Address) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for x := range d.m {
		if la, err := x.ep.GetLocalAddress(); err == nil && la.Addr == a {
			x.once.Do(func() { close(x.abort) })
			n++
		}
	}
	return n
}

// abortConnsFrom resets the TCP connections, dialed or accepted, whose
// local address is a, and fails the dials from it. It returns how many
// it aborted.
func (s *Stack) abortConnsFrom(p netip.Addr) int {
	a := tcpip.AddrFromSlice(p.Unmap().AsSlice())
	n := s.dialing.abortFrom(a)
	for _, te := range s.gs.RegisteredEndpoints() {
		ep, ok := te.(*tcp.Endpoint)
		if !ok {
			continue
		}
		switch tcp.EndpointState(ep.State()) {
		case tcp.StateEstablished, tcp.StateFinWait1, tcp.StateFinWait2,
			tcp.StateCloseWait, tcp.StateLastAck, tcp.StateClosing:
		default:
			// Listeners, handshakes (Abort would close them under
			// their owner: dials are failed above, half-open
			// accepts time out), TIME-WAIT and closed ones.
			continue
		}
		la, err := ep.GetLocalAddress()
		if err != nil || la.Addr != a {
			continue
		}
		ep.Abort()
		n++
	}
	if n > 0 {
		s.counters.addrAborts.Add(uint64(n))
		s.log.Info("stack: connections aborted: their address was removed", "addr", p, "n", n)
	}
	return n
}
