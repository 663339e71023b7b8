package stack

import (
	"net/netip"
	"slices"
	"sync"
	"syscall"
)

// Addresses a socket may use, and what Linux answers for the others.
//
// The stack has one interface, the modem, and no loopback one: the
// special destinations Linux delivers locally or refuses are answered
// at once here, without a packet (gVisor would drop one to 127.0.0.0/8
// as a martian, logging it, and the caller would wait for its deadline).

// checkLocal fails with EADDRNOTAVAIL when a (a local address to bind)
// is neither unspecified nor one of the stack's addresses.
func (s *Stack) checkLocal(a netip.Addr) error {
	if !a.IsValid() || a.IsUnspecified() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.ContainsFunc(s.addrs, func(p netip.Prefix) bool { return p.Addr() == a }) {
		return nil
	}
	return syscall.EADDRNOTAVAIL
}

// ownAddr is the stack's first address of a's family (global before
// link-local for IPv6).
func (s *Stack) ownAddr(v4 bool) (netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ll netip.Addr
	for _, p := range s.addrs {
		a := p.Addr()
		switch {
		case a.Is4() != v4:
		case a.IsLinkLocalUnicast():
			if !ll.IsValid() {
				ll = a
			}
		default:
			return a, true
		}
	}
	return ll, ll.IsValid()
}

// dialTarget is where a dial to a goes, or the error Linux gives at once
// (tcp: a TCP connect, else a UDP or ICMP one):
//
//   - unspecified (0.0.0.0, ::): Linux connects to itself; here the
//     stack's own address of that family (ENETUNREACH without one), so a
//     listener of the stack answers and a closed port is ECONNREFUSED;
//   - loopback (127.0.0.0/8, ::1): TCP ECONNREFUSED, what Linux says
//     when nothing listens there, and nothing can listen there on the
//     stack; UDP and ICMP ENETUNREACH (no loopback interface);
//   - TCP to broadcast or multicast: ENETUNREACH, as tcp_v4_connect and
//     tcp_v6_connect; UDP to 255.255.255.255: EACCES (no SO_BROADCAST).
func (s *Stack) dialTarget(a netip.Addr, tcp bool) (netip.Addr, error) {
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		own, ok := s.ownAddr(a.Is4())
		if !ok {
			return a, syscall.ENETUNREACH
		}
		return own, nil
	case a.IsLoopback():
		if tcp {
			return a, syscall.ECONNREFUSED
		}
		return a, syscall.ENETUNREACH
	case tcp && (a.IsMulticast() || a == limitedBroadcast):
		return a, syscall.ENETUNREACH
	case a == limitedBroadcast:
		return a, syscall.EACCES
	}
	return a, nil
}

var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// datagramTarget is the check of one datagram's destination (WriteTo):
// the errors of dialTarget; an unspecified destination is refused
// (EINVAL) rather than rewritten.
func (s *Stack) datagramTarget(a netip.Addr) error {
	if a.IsUnspecified() {
		return syscall.EINVAL
	}
	_, err := s.dialTarget(a, false)
	return err
}

// listenTable is the stack's TCP listeners by port. gVisor lets two
// listeners with SO_REUSEADDR share a port when one is a wildcard;
// Linux does not (EADDRINUSE), and neither does the stack.
type listenTable struct {
	mu sync.Mutex
	m  map[uint16][]*listenEntry
}

type listenEntry struct {
	ap   netip.AddrPort
	dual bool // [::] accepting IPv4 too
}

// listenReg is a registered listener (nil: none).
type listenReg = *listenEntry

func (e *listenEntry) overlaps(o *listenEntry) bool {
	if e.dual || o.dual {
		return true
	}
	a, b := e.ap.Addr(), o.ap.Addr()
	if a.Is4() != b.Is4() {
		return false
	}
	return a == b || a.IsUnspecified() || b.IsUnspecified()
}

func (t *listenTable) add(ap netip.AddrPort, dual bool) (listenReg, error) {
	e := &listenEntry{ap: ap, dual: dual}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range t.m[ap.Port()] {
		if e.overlaps(o) {
			return nil, syscall.EADDRINUSE
		}
	}
	if t.m == nil {
		t.m = map[uint16][]*listenEntry{}
	}
	t.m[ap.Port()] = append(t.m[ap.Port()], e)
	return e, nil
}

func (t *listenTable) remove(e listenReg) {
	if e == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l := slices.DeleteFunc(t.m[e.ap.Port()], func(o *listenEntry) bool { return o == e })
	if len(l) == 0 {
		delete(t.m, e.ap.Port())
	} else {
		t.m[e.ap.Port()] = l
	}
}
