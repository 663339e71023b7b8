package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// udpBufSize holds the largest UDP payload plus the longest SOCKS5 UDP
// header in front of it.
const udpBufSize = 65535 + udpHeaderMax

var udpBufs = sync.Pool{New: func() any { b := make([]byte, udpBufSize); return &b }}

// association is one UDP ASSOCIATE, RFC 1928 §7. Its client side is a UDP
// socket on the host, on the address the client reached the proxy at; its
// outside is one unconnected PacketListener socket per address family
// (QUIC and peer-to-peer traffic send to many destinations from one port,
// which connected sockets per destination would break, and it costs one
// goroutine per family, not per destination).
//
// Goroutines: the control connection's (waits for it to close), the
// client reader, and one outside reader per family in use. The client
// reader alone writes flows and the name cache; outside readers read flows.
type association struct {
	s      *Server
	ctrl   net.Conn
	client *net.UDPConn

	// The client is the first sender from the control connection's IP
	// (and the port it announced, if any); later datagrams from elsewhere
	// are dropped, so that no one else can use the association.
	wantIP     netip.Addr
	wantPort   uint16
	clientAddr atomic.Pointer[netip.AddrPort]

	idle time.Duration
	last atomic.Int64 // unix nanos of the last datagram either way

	mu       sync.Mutex
	flows    map[netip.AddrPort]int64 // destination → last use (unix nanos)
	outside  [2]net.PacketConn        // [0] udp4, [1] udp6
	closed   bool
	maxFlows int

	names map[string]nameEntry // client reader only
	wg    sync.WaitGroup
}

type nameEntry struct {
	ip      netip.Addr
	expires time.Time
}

// nameTTL bounds how long a resolved name is reused for datagrams: long
// enough that a QUIC flow does not query DNS per packet, short enough to
// follow a changed record.
const nameTTL = 30 * time.Second

// socksAssociate grants a UDP ASSOCIATE and runs it until the control
// connection closes or the association is idle for UDPIdleTimeout.
func (s *Server) socksAssociate(c net.Conn, release func(), req Request) {
	if s.PacketListener == nil {
		s.reply(c, ReplyCommandNotSupported, Addr{})
		s.badRequest(c, "socks5 UDP ASSOCIATE", errors.New("UDP relaying is not configured"))
		return
	}
	local, ok := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok || !ok2 {
		s.reply(c, ReplyGeneralFailure, Addr{})
		s.badRequest(c, "socks5 UDP ASSOCIATE", errors.New("control connection is not TCP"))
		return
	}
	max := limit(s.MaxAssociations, DefaultMaxAssociations)
	s.mu.Lock()
	if max > 0 && s.assocs >= max {
		s.mu.Unlock()
		s.stats.UDPAssociationsRejected.Add(1)
		s.reply(c, ReplyGeneralFailure, Addr{})
		s.logger().Warn("proxy: UDP association limit reached, refusing", "client", c.RemoteAddr(), "max_associations", max)
		return
	}
	s.assocs++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.assocs--
		s.mu.Unlock()
	}()

	// The client side listens where the client reached us: a loopback
	// proxy keeps its UDP relay on loopback too.
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: local.IP, Zone: local.Zone})
	if err != nil {
		s.reply(c, ReplyGeneralFailure, Addr{})
		s.logger().Warn("proxy: UDP relay socket", "client", c.RemoteAddr(), "err", err)
		return
	}
	a := &association{
		s:        s,
		ctrl:     c,
		client:   pc,
		wantIP:   remote.AddrPort().Addr().Unmap(),
		idle:     s.udpIdleTimeout(),
		flows:    make(map[netip.AddrPort]int64),
		names:    make(map[string]nameEntry),
		maxFlows: limit(s.MaxFlowsPerAssociation, DefaultMaxFlowsPerAssociation),
	}
	// DST.ADDR/DST.PORT name the client's sending address when it knows
	// it; zeros mean it does not (RFC 1928 §4, UDP ASSOCIATE).
	if req.Addr.Name == "" && req.Addr.IP.IsValid() && !req.Addr.IP.IsUnspecified() {
		a.wantIP = req.Addr.IP.Unmap()
	}
	a.wantPort = req.Addr.Port
	a.touch()

	if err := s.reply(c, ReplySucceeded, addrOf(pc.LocalAddr())); err != nil {
		pc.Close()
		return
	}
	release()
	s.stats.UDPAssociations.Add(1)
	s.stats.UDPAssociationsActive.Add(1)
	defer s.stats.UDPAssociationsActive.Add(^uint64(0))
	s.logger().Debug("proxy: UDP association", "client", c.RemoteAddr(), "relay", pc.LocalAddr())

	a.goRelay(a.clientLoop)
	waitClosed(c)
	a.close()
	a.wg.Wait()
}

func (a *association) touch() { a.last.Store(time.Now().UnixNano()) }

// close ends the association: every socket closed, which stops every
// goroutine of it.
func (a *association) close() {
	a.mu.Lock()
	a.closed = true
	out := a.outside
	a.mu.Unlock()
	a.ctrl.Close()
	a.client.Close()
	for _, pc := range out {
		if pc != nil {
			pc.Close()
		}
	}
}

// goRelay starts one of the association's relay goroutines: loop runs
// with a buffer from udpBufs, and the association closes when it returns.
func (a *association) goRelay(loop func(buf []byte)) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer a.close()
		bp := udpBufs.Get().(*[]byte)
		defer udpBufs.Put(bp)
		loop(*bp)
	}()
}

// clientLoop relays datagrams from the client to their destinations.
func (a *association) clientLoop(buf []byte) {
	s := a.s
	var armed time.Time
	for {
		if a.idle > 0 {
			if now := time.Now(); now.Sub(armed) > a.idle/4 {
				armed = now
				a.client.SetReadDeadline(now.Add(a.idle))
			}
		}
		n, from, err := a.client.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if time.Since(time.Unix(0, a.last.Load())) < a.idle {
					armed = time.Time{}
					a.expireFlows()
					continue
				}
				s.logger().Debug("proxy: UDP association idle, closing", "client", a.ctrl.RemoteAddr())
			}
			return
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if !a.fromClient(from) {
			s.stats.UDPDropped.Add(1)
			s.logger().Debug("proxy: UDP datagram from a stranger dropped", "client", a.ctrl.RemoteAddr(), "from", from)
			continue
		}
		dst, payload, err := ParseUDPHeader(buf[:n])
		if err != nil {
			s.stats.BadRequests.Add(1)
			s.stats.UDPDropped.Add(1)
			s.logger().Info("proxy: bad request", "client", from, "what", "socks5 UDP header", "err", err)
			continue
		}
		ap, err := a.resolve(dst)
		if err != nil {
			s.stats.UDPDropped.Add(1)
			s.logger().Info("proxy: UDP destination not resolved", "client", from, "target", dst.String(), "err", err)
			continue
		}
		pc, err := a.flow(ap)
		if err != nil {
			s.stats.UDPDropped.Add(1)
			continue
		}
		if _, err := pc.WriteTo(payload, net.UDPAddrFromAddrPort(ap)); err != nil {
			s.stats.UDPDropped.Add(1)
			s.logger().Debug("proxy: UDP send", "target", ap, "err", err)
			continue
		}
		a.touch()
		s.stats.UDPPacketsUp.Add(1)
		s.stats.UDPBytesUp.Add(uint64(len(payload)))
	}
}

// fromClient reports whether a datagram from from belongs to this
// association's client, locking the client address on first use.
func (a *association) fromClient(from netip.AddrPort) bool {
	if ca := a.clientAddr.Load(); ca != nil {
		return *ca == from
	}
	if from.Addr() != a.wantIP || (a.wantPort != 0 && from.Port() != a.wantPort) {
		return false
	}
	a.clientAddr.Store(&from)
	return true
}

// resolve turns a datagram's destination into an address, reusing recent
// answers so that a stream of datagrams to one name costs one lookup.
func (a *association) resolve(dst Addr) (netip.AddrPort, error) {
	if dst.Name == "" {
		return netip.AddrPortFrom(dst.IP.Unmap(), dst.Port), nil
	}
	now := time.Now()
	if e, ok := a.names[dst.Name]; ok && now.Before(e.expires) {
		return netip.AddrPortFrom(e.ip, dst.Port), nil
	}
	ctx, cancel := context.WithTimeout(a.s.context(), 5*time.Second)
	defer cancel()
	ap, err := a.s.resolve(ctx, "ip", dst)
	if err != nil {
		return ap, err
	}
	if len(a.names) >= a.maxFlows {
		clear(a.names) // crude, bounded; a cache miss costs one lookup
	}
	a.names[dst.Name] = nameEntry{ip: ap.Addr(), expires: now.Add(nameTTL)}
	return ap, nil
}

// flow admits a destination (counting it against MaxFlowsPerAssociation
// when new) and returns the outside socket for its family, opening it and
// its reader on first use.
func (a *association) flow(ap netip.AddrPort) (net.PacketConn, error) {
	s := a.s
	now := time.Now().UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, net.ErrClosed
	}
	if _, ok := a.flows[ap]; !ok {
		if a.maxFlows > 0 && len(a.flows) >= a.maxFlows {
			a.expireFlowsLocked(now)
		}
		if a.maxFlows > 0 && len(a.flows) >= a.maxFlows {
			s.stats.UDPFlowsRejected.Add(1)
			s.logger().Info("proxy: UDP flow limit reached, dropping", "client", a.ctrl.RemoteAddr(), "target", ap, "max_flows", a.maxFlows)
			return nil, errFlowLimit
		}
		s.stats.UDPFlows.Add(1)
	}
	a.flows[ap] = now
	fam, network := 0, "udp4"
	if !ap.Addr().Is4() {
		fam, network = 1, "udp6"
	}
	if pc := a.outside[fam]; pc != nil {
		return pc, nil
	}
	pc, err := s.PacketListener.ListenPacket(s.context(), network, ":0")
	if err != nil {
		s.logger().Warn("proxy: UDP outside socket", "network", network, "err", err)
		return nil, err
	}
	a.outside[fam] = pc
	a.goRelay(func(buf []byte) { a.outsideLoop(pc, buf) })
	return pc, nil
}

var errFlowLimit = errors.New("proxy: UDP flow limit reached")

func (a *association) expireFlows() {
	a.mu.Lock()
	a.expireFlowsLocked(time.Now().UnixNano())
	a.mu.Unlock()
}

func (a *association) expireFlowsLocked(now int64) {
	if a.idle <= 0 {
		return
	}
	for ap, last := range a.flows {
		if now-last > int64(a.idle) {
			delete(a.flows, ap)
		}
	}
}

// outsideLoop relays datagrams from destinations back to the client. Only
// destinations the client has sent to are let through: the association
// filters like an address-and-port-restricted NAT, so it cannot be used
// to reach the client from anywhere.
func (a *association) outsideLoop(pc net.PacketConn, buf []byte) {
	s := a.s
	for {
		n, from, err := pc.ReadFrom(buf[udpHeaderMax:])
		if err != nil {
			return
		}
		src := addrOf(from)
		ap := netip.AddrPortFrom(src.IP, src.Port)
		a.mu.Lock()
		_, known := a.flows[ap]
		if known {
			a.flows[ap] = time.Now().UnixNano()
		}
		a.mu.Unlock()
		ca := a.clientAddr.Load()
		if !known || ca == nil {
			s.stats.UDPDropped.Add(1)
			continue
		}
		var hb [udpHeaderMax]byte
		h := AppendUDPHeader(hb[:0], src)
		start := udpHeaderMax - len(h)
		copy(buf[start:], h)
		if _, err := a.client.WriteToUDPAddrPort(buf[start:udpHeaderMax+n], *ca); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.stats.UDPDropped.Add(1)
			continue
		}
		a.touch()
		s.stats.UDPPacketsDown.Add(1)
		s.stats.UDPBytesDown.Add(uint64(n))
	}
}
