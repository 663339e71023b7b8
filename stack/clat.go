package stack

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/internal/segment"
	"github.com/mhistack/mhistack/link/siit"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/time/rate"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// The CLAT (RFC 6877 §6.3, the customer-side translator of 464XLAT):
// on an IPv6-only session the stack gets a second NIC, clatNIC, with the
// IPv4 address CLATAddr4 and the IPv4 default route. Its link endpoint
// (clatLink) translates what the stack sends there to IPv6 (link/siit,
// RFC 7915) with the source clat6, an address of the session's /64 that
// the stack itself does not own, and the destination embedded in the
// NAT64 prefix, and writes it to the modem's link; the tap hands the
// IPv6 packets for clat6 to it, translated back to IPv4. The NAT64 in the
// network does the rest. Its MTU is the link's less 20 bytes, the
// difference between the IPv6 and IPv4 headers, so translated packets
// fit the bearer.

// CLATMode says when the stack runs its CLAT.
type CLATMode int

const (
	// CLATAuto (the default) runs the CLAT when the data session has
	// IPv6 but no IPv4 and a NAT64 prefix is found (RFC 7050 discovery,
	// or Config.NAT64Prefix).
	CLATAuto CLATMode = iota
	// CLATOff never runs it: an IPv6-only session has no IPv4.
	CLATOff
	// CLATForce runs it whenever the session has IPv6, a dual-stack one
	// too (its IPv4 address is then not used), with the Well-Known
	// Prefix if discovery finds none and Config.NAT64Prefix is unset.
	CLATForce
)

func (m CLATMode) String() string {
	switch m {
	case CLATAuto:
		return "auto"
	case CLATOff:
		return "off"
	case CLATForce:
		return "force"
	}
	return "clat-?"
}

// clatNIC is the CLAT's NIC (the modem is nicID).
const clatNIC tcpip.NICID = 2

// CLATAddr4 is the CLAT's IPv4 address: the first of 192.0.0.0/29, the
// block RFC 7335 sets aside for a host's side of an IPv4 service
// continuity translator.
var CLATAddr4 = netip.AddrFrom4([4]byte{192, 0, 0, 1})

// ipv4onlyArpa is the name of RFC 7050 §2.2 discovery.
const ipv4onlyArpa = "ipv4only.arpa"

// clatHeaderDiff is how much longer an IPv6 header is than an IPv4 one
// (RFC 6877 §6.3: the CLAT's IPv4 MTU is the IPv6 one less this).
const clatHeaderDiff = header.IPv6MinimumSize - header.IPv4MinimumSize

// clatState is one CLAT configuration: the NAT64 prefix and clat6. It is
// the Mapper of its translator; replaced as a whole when either changes.
type clatState struct {
	pfx   siit.Prefix
	addr6 [16]byte
	tr    siit.Translator
}

func newCLATState(pfx siit.Prefix, addr6 netip.Addr) *clatState {
	c := &clatState{pfx: pfx, addr6: addr6.As16()}
	c.tr.Map = c
	return c
}

// To6 implements siit.Mapper: CLATAddr4 is clat6, any other address is
// embedded in the prefix.
func (c *clatState) To6(a [4]byte) ([16]byte, bool) {
	if a == CLATAddr4.As4() {
		return c.addr6, true
	}
	return c.pfx.Embed(a)
}

// To4 implements siit.Mapper.
func (c *clatState) To4(a [16]byte) ([4]byte, bool) {
	if a == c.addr6 {
		return CLATAddr4.As4(), true
	}
	return c.pfx.Extract(a)
}

// clatAddr6 returns the CLAT's IPv6 address for the stack's address a:
// a's /64 with an interface identifier of its own (RFC 6877 §6.3 wants
// an address dedicated to translation, which a 3GPP UE takes from its
// /64, RFC 6459 §5.2).
func clatAddr6(a netip.Addr) netip.Addr {
	b := a.As16()
	iid := [8]byte{0x04, 0x64, 0, 0, 0xc0, 0, 0, 1} // "464", 192.0.0.1
	if [8]byte(b[8:]) == iid {
		iid[7] = 2
	}
	copy(b[8:], iid[:])
	return netip.AddrFrom16(b)
}

// clatCounters count packets through the CLAT, both ways, and the ICMP
// errors it sent of its own.
type clatCounters struct {
	translated, refused, icmpErrors atomic.Uint64
}

// The CLAT's own ICMP errors are rate-limited (RFC 4443 §2.4 f, RFC 1812
// §4.3.2.8) by a token bucket: clatErrorBurst at once, clatErrorRate a
// second after that.
const (
	clatErrorRate  = 10
	clatErrorBurst = 10
)

// clatScratch is what one translation works with: pooled, so that
// translating allocates nothing per packet.
type clatScratch struct {
	seg          segment.Segmenter
	in, out, err []byte
	list         gstack.PacketBufferList
}

var clatScratchPool = sync.Pool{New: func() any { return new(clatScratch) }}

// grow returns b with room for n bytes.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, max(n, 2048))
	}
	return b[:n]
}

// clatLink is clatNIC's link endpoint: IPv4 in from the stack, IPv6 out
// to the modem's link through the tap, and the reverse (deliver).
type clatLink struct {
	s    *Stack
	mtu  atomic.Uint32
	disp atomic.Pointer[gstack.NetworkDispatcher]
	// errors limits the ICMP errors the CLAT sends of its own.
	errors *rate.Limiter
	// The ICMPv4 errors for the stack go on goroutines of their own
	// (pending), not from inside WritePackets: gVisor may call it with
	// the sending endpoint's lock held, which the error's handling takes.
	// stopped is set by Stack.Close, which then waits for pending.
	pendingMu sync.Mutex
	stopped   bool
	pending   sync.WaitGroup
}

func (l *clatLink) MTU() uint32                             { return l.mtu.Load() }
func (l *clatLink) SetMTU(mtu uint32)                       { l.mtu.Store(mtu) }
func (l *clatLink) MaxHeaderLength() uint16                 { return 0 }
func (l *clatLink) LinkAddress() tcpip.LinkAddress          { return "" }
func (l *clatLink) SetLinkAddress(tcpip.LinkAddress)        {}
func (l *clatLink) IsAttached() bool                        { return l.disp.Load() != nil }
func (l *clatLink) Wait()                                   {}
func (l *clatLink) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (l *clatLink) AddHeader(*gstack.PacketBuffer)          {}
func (l *clatLink) ParseHeader(*gstack.PacketBuffer) bool   { return true }
func (l *clatLink) Close()                                  {}
func (l *clatLink) SetOnCloseAction(func())                 {}
func (l *clatLink) GSOMaxSize() uint32                      { return 0 }
func (l *clatLink) SupportedGSO() gstack.SupportedGSO       { return gstack.GSONotSupported }

// Capabilities: the modem link's RX checksum offload, since what
// deliver translates has been checked (or not) by it.
func (l *clatLink) Capabilities() gstack.LinkEndpointCapabilities {
	return l.s.tap.Capabilities() & gstack.CapabilityRXChecksumOffload
}

func (l *clatLink) Attach(d gstack.NetworkDispatcher) {
	if d == nil {
		l.disp.Store(nil)
		return
	}
	l.disp.Store(&d)
}

// WritePackets translates the stack's IPv4 packets to IPv6 and writes
// them to the modem's link. A packet the translator refuses is dropped
// and counted, as a router drops what it cannot forward, and answered
// with the ICMPv4 error RFC 7915 §4 names, if any. A translated packet
// larger than the link's MTU, or with DF clear larger than 1280 bytes
// (RFC 7915 §4), goes as IPv6 fragments if the IPv4 packet lets it be
// cut; with DF set it is answered with Fragmentation Needed.
func (l *clatLink) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	c := l.s.tap.clat.Load()
	if c == nil {
		l.s.counters.clat.refused.Add(uint64(pkts.Len()))
		return 0, &tcpip.ErrHostUnreachable{}
	}
	sc := clatScratchPool.Get().(*clatScratch)
	defer clatScratchPool.Put(sc)
	mtu := int(l.s.tap.MTU())
	for _, pkt := range pkts.AsSlice() {
		sc.seg.Reset(pkt)
		size := sc.seg.Next()
		sc.in = grow(sc.in, size)
		sc.seg.Write(sc.in)
		sc.out = grow(sc.out, size+2*(clatHeaderDiff+8))
		n, err := c.tr.To6(sc.out, sc.in)
		if err != nil {
			l.s.counters.clat.refused.Add(1)
			l.error4(sc, err, 0)
			continue
		}
		limit, id, cut := siit.FragmentLimit(sc.in, mtu)
		switch {
		case n <= limit:
			sc.list.PushBack(ipv6Packet(sc.out[:n]))
		case !cut:
			l.s.counters.clat.refused.Add(1)
			l.error4(sc, nil, mtu)
			continue
		default:
			// sc.in (the IPv4 packet, no longer needed) takes each piece
			// in turn: a packet buffer copies it.
			sc.in = grow(sc.in, limit)
			if !l.cut(sc, sc.out[:n], id, limit) {
				l.s.counters.clat.refused.Add(1)
				continue
			}
		}
		l.s.counters.clat.translated.Add(1)
	}
	sc.seg.Release()
	if sc.list.Len() > 0 {
		l.s.tap.WritePackets(sc.list)
		sc.list.Reset()
	}
	return pkts.Len(), nil
}

// cut queues the IPv6 packet p as fragments of at most limit bytes,
// each made in sc.in; false if it cannot be cut (NextFragment refuses
// a packet at its first piece, before anything is queued).
func (l *clatLink) cut(sc *clatScratch, p []byte, id uint32, limit int) bool {
	for at := 0; ; {
		m, next, err := siit.NextFragment(sc.in, p, id, at, limit)
		if err != nil {
			return false
		}
		sc.list.PushBack(ipv6Packet(sc.in[:m]))
		if next == 0 {
			return true
		}
		at = next
	}
}

// error4 answers the stack's IPv4 packet sc.in, refused with err by the
// translator (nil: too big for the link of MTU mtu, DF set), with the
// ICMPv4 error RFC 7915 §4 names, if any and the rate limit allows it,
// delivered to the stack as if from the network, on a goroutine of its
// own (rate-limited, so few).
func (l *clatLink) error4(sc *clatScratch, err error, mtu int) {
	d := l.disp.Load()
	if d == nil {
		return
	}
	sc.err = grow(sc.err, 576)
	var n int
	if err == nil {
		n, err = siit.FragNeeded4(sc.err, sc.in, mtu)
	} else {
		n, err = siit.ErrorTo4(sc.err, sc.in, err)
	}
	if err != nil || !l.errors.Allow() {
		return
	}
	l.pendingMu.Lock()
	defer l.pendingMu.Unlock()
	if l.stopped {
		return
	}
	l.s.counters.clat.icmpErrors.Add(1)
	p := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(sc.err[:n])})
	p.NetworkProtocolNumber = header.IPv4ProtocolNumber
	l.pending.Add(1)
	go func() {
		defer l.pending.Done()
		(*d).DeliverNetworkPacket(header.IPv4ProtocolNumber, p)
		p.DecRef()
	}()
}

// stopErrors waits for the ICMPv4 errors on their way to the stack and
// has error4 send no more (Stack.Close).
func (l *clatLink) stopErrors() {
	l.pendingMu.Lock()
	l.stopped = true
	l.pendingMu.Unlock()
	l.pending.Wait()
}

// error6 answers the IPv6 packet sc.in for the CLAT's address, refused
// with err by the translator, with the ICMPv6 error RFC 7915 §5 names,
// if any and the rate limit allows it, sent to the network.
func (l *clatLink) error6(sc *clatScratch, c *clatState, err error) {
	sc.err = grow(sc.err, 1280)
	n, err := siit.ErrorTo6(sc.err, sc.in, c.addr6, err)
	if err != nil || !l.errors.Allow() {
		return
	}
	l.s.counters.clat.icmpErrors.Add(1)
	sc.list.PushBack(ipv6Packet(sc.err[:n]))
	l.s.tap.WritePackets(sc.list)
	sc.list.Reset()
}

func ipv6Packet(b []byte) *gstack.PacketBuffer {
	p := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
	p.NetworkProtocolNumber = header.IPv6ProtocolNumber
	return p
}

// deliver takes an IPv6 packet from the modem for the CLAT's address,
// translated to IPv4, to clatNIC. It reports whether pkt was the CLAT's.
func (l *clatLink) deliver(c *clatState, pkt *gstack.PacketBuffer) bool {
	h := pkt.NetworkHeader().Slice()
	if len(h) < header.IPv6MinimumSize {
		var ok bool
		if h, ok = pkt.Data().PullUp(header.IPv6MinimumSize); !ok {
			return false
		}
	}
	if [16]byte(h[24:40]) != c.addr6 {
		return false
	}
	d := l.disp.Load()
	if d == nil {
		l.s.counters.clat.refused.Add(1)
		return true
	}
	sc := clatScratchPool.Get().(*clatScratch)
	defer clatScratchPool.Put(sc)
	sc.seg.Reset(pkt)
	size := sc.seg.Next()
	sc.in = grow(sc.in, size)
	sc.seg.Write(sc.in)
	sc.seg.Release()
	sc.out = grow(sc.out, size)
	n, err := c.tr.To4(sc.out, sc.in)
	if err != nil {
		l.s.counters.clat.refused.Add(1)
		l.error6(sc, c, err)
		return true
	}
	l.s.counters.clat.translated.Add(1)
	p4 := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(sc.out[:n])})
	p4.NetworkProtocolNumber = header.IPv4ProtocolNumber
	p4.RXChecksumValidated = pkt.RXChecksumValidated
	(*d).DeliverNetworkPacket(header.IPv4ProtocolNumber, p4)
	p4.DecRef()
	return true
}

// NAT64Prefix returns the NAT64 prefix the CLAT translates with, or the
// zero Prefix when no CLAT runs.
func (s *Stack) NAT64Prefix() netip.Prefix {
	if c := s.tap.clat.Load(); c != nil {
		return c.pfx.Prefix()
	}
	return netip.Prefix{}
}

// errNoNAT64 is discovery finding no prefix.
var errNoNAT64 = errors.New("stack: CLAT: no NAT64 prefix (no AAAA record for ipv4only.arpa embeds 192.0.0.170 or .171)")

// How long a prefix found by RFC 7050 discovery is kept: the TTL of the
// AAAA record it came in (RFC 7050 §3), within nat64TTLMin and
// nat64TTLMax, so that a TTL of 0 does not have the CLAT ask all the
// time nor a TTL of years never. A discovery that fails keeps the prefix
// and is tried again after nat64TTLMin, twice that after a second
// failure, and so on up to nat64RetryMax.
const (
	nat64TTLMin   = time.Minute
	nat64TTLMax   = 24 * time.Hour
	nat64RetryMax = time.Hour
)

// discoverNAT64 asks the stack's DNS for the AAAA records of
// ipv4only.arpa and finds the prefix in them (RFC 7050 §3), trying up to
// three times; ttl is the least TTL of the records.
func (s *Stack) discoverNAT64(ctx context.Context) (pfx siit.Prefix, ttl time.Duration, err error) {
	servers := s.DNSServers()
	if len(servers) == 0 {
		return siit.Prefix{}, 0, ErrNoDNS
	}
	name := dnsmessage.MustNewName(ipv4onlyArpa + ".")
	for range 3 {
		var addrs []netip.Addr
		var secs uint32
		addrs, secs, _, err = s.query(ctx, servers, name, dnsmessage.TypeAAAA)
		for _, a := range addrs {
			if p, ok := siit.Discover(a); ok {
				return p, time.Duration(secs) * time.Second, nil
			}
		}
		if err == nil {
			return siit.Prefix{}, 0, errNoNAT64
		}
		if ctx.Err() != nil {
			return siit.Prefix{}, 0, ctx.Err()
		}
	}
	return siit.Prefix{}, 0, err
}

// wantCLAT returns the IPv6 address the CLAT of a session with addrs
// takes its /64 from, if the mode has one run.
func (s *Stack) wantCLAT(addrs []netip.Prefix) (netip.Addr, bool) {
	if s.cfg.CLAT == CLATOff {
		return netip.Addr{}, false
	}
	var v6 netip.Addr
	v4 := false
	for _, p := range addrs {
		a := p.Addr()
		switch {
		case a.Is4():
			v4 = true
		case a.Is6() && !a.IsLinkLocalUnicast() && !v6.IsValid():
			v6 = a
		}
	}
	if !v6.IsValid() || (v4 && s.cfg.CLAT != CLATForce) {
		return netip.Addr{}, false
	}
	return v6, true
}

// followCLAT starts or stops the CLAT for the session's addresses
// (follower.apply). Discovery runs on a goroutine of its own, owned by
// the stack: a newer call or Close cancels it, and Close waits for it.
func (s *Stack) followCLAT(addrs []netip.Prefix) {
	v6, want := s.wantCLAT(addrs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if want && s.clatFor == v6 {
		return // running or being discovered for this address
	}
	if s.clatCancel != nil {
		s.clatCancel()
		s.clatCancel = nil
	}
	s.clatFor = netip.Addr{}
	if !want {
		s.stopCLATLocked()
		return
	}
	s.clatFor = v6
	ctx, cancel := context.WithCancel(context.Background())
	s.clatCancel = cancel
	done := make(chan struct{})
	s.clatDone = done
	s.clatWG.Add(1)
	go func() {
		defer s.clatWG.Done()
		s.runCLAT(ctx, v6, done)
	}()
}

// waitCLAT waits until the CLAT's discovery, if one runs, has started
// the CLAT or given up, or ctx is done.
func (s *Stack) waitCLAT(ctx context.Context) {
	s.mu.Lock()
	done := s.clatDone
	s.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// runCLAT finds the prefix and brings the CLAT up for v6, then closes
// started. Config.NAT64Prefix wins over the network's PREF64 (RFC 8781),
// which wins over discovery (RFC 9872). A prefix from discovery is found
// again when its TTL runs out (followNAT64TTL), until ctx ends.
func (s *Stack) runCLAT(ctx context.Context, v6 netip.Addr, started chan struct{}) {
	defer func() {
		if started != nil {
			close(started)
		}
	}()
	discover := s.clatDiscover
	if discover == nil {
		discover = s.discoverNAT64
	}
	pfx, err := siit.NewPrefix(s.cfg.NAT64Prefix)
	var ttl time.Duration
	dns := false
	if p := s.pref64(); !s.cfg.NAT64Prefix.IsValid() && p.IsValid() {
		pfx, err = siit.NewPrefix(p)
	} else if !s.cfg.NAT64Prefix.IsValid() {
		dns = true
		pfx, ttl, err = discover(ctx)
		if err != nil && s.cfg.CLAT == CLATForce && ctx.Err() == nil {
			pfx, err = siit.NewPrefix(siit.WellKnownPrefix)
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("stack: CLAT not started", "err", err)
			s.events.push(Event{Kind: EventCLAT, Err: err})
		}
		return
	}
	if !s.moveCLAT(ctx, pfx, v6) {
		return
	}
	close(started)
	started = nil
	if dns {
		s.followNAT64TTL(ctx, v6, pfx, ttl, discover)
	}
}

// moveCLAT starts the CLAT for v6 on pfx, or moves it there, unless ctx
// has ended; it reports whether the CLAT runs.
func (s *Stack) moveCLAT(ctx context.Context, pfx siit.Prefix, v6 netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || ctx.Err() != nil {
		return false
	}
	if err := s.startCLATLocked(newCLATState(pfx, clatAddr6(v6))); err != nil {
		s.log.Warn("stack: CLAT not started", "err", err)
		s.events.push(Event{Kind: EventCLAT, Err: err})
		return false
	}
	s.events.push(Event{Kind: EventCLAT, Prefix: pfx.Prefix()})
	return true
}

// followNAT64TTL runs discovery again each time the TTL of what it found
// runs out (ttl 0: it failed), and moves the CLAT to a changed prefix
// as a changed PREF64 does; a failed discovery keeps the prefix and is
// retried with back-off. It returns when ctx ends: the session's address
// or the PREF64 changed (followCLAT runs the CLAT anew), or Close.
func (s *Stack) followNAT64TTL(ctx context.Context, v6 netip.Addr, cur siit.Prefix, ttl time.Duration,
	discover func(context.Context) (siit.Prefix, time.Duration, error)) {
	floor := s.clatTTLMin
	if floor <= 0 {
		floor = nat64TTLMin
	}
	retry := floor
	wait := min(max(ttl, floor), nat64TTLMax)
	if ttl == 0 {
		wait, retry = retry, min(2*retry, nat64RetryMax)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pfx, ttl, err := discover(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Info("stack: CLAT: NAT64 prefix discovery failed, keeping "+cur.Prefix().String(), "err", err, "retry", retry)
			t.Reset(retry)
			retry = min(2*retry, nat64RetryMax)
			continue
		}
		retry = floor
		t.Reset(min(max(ttl, floor), nat64TTLMax))
		if pfx.Prefix() == cur.Prefix() {
			continue
		}
		if s.pref64().IsValid() {
			return // the network's PREF64 wins (RFC 9872): raFollow moves the CLAT to it
		}
		s.log.Info("stack: CLAT: the NAT64 prefix changed", "from", cur.Prefix(), "to", pfx.Prefix())
		if !s.moveCLAT(ctx, pfx, v6) {
			return
		}
		cur = pfx
	}
}

// startCLATLocked makes clatNIC (once) and points IPv4 at it.
func (s *Stack) startCLATLocked(c *clatState) error {
	if s.clatLink == nil {
		l := &clatLink{s: s, errors: rate.NewLimiter(clatErrorRate, clatErrorBurst)}
		s.tap.xlat.Store(l)
		l.mtu.Store(s.clatMTU(s.tap.MTU()))
		if err := s.gs.CreateNIC(clatNIC, l); err != nil {
			return errors.New("stack: CLAT NIC: " + err.String())
		}
		pa := tcpip.ProtocolAddress{Protocol: header.IPv4ProtocolNumber,
			AddressWithPrefix: tcpip.AddrFrom4(CLATAddr4.As4()).WithPrefix()}
		if err := s.gs.AddProtocolAddress(clatNIC, pa, gstack.AddressProperties{}); err != nil {
			return errors.New("stack: CLAT address: " + err.String())
		}
		s.clatLink = l
	}
	s.tap.clat.Store(c)
	s.setRoutes(s.cfg.Routes)
	return nil
}

// stopCLATLocked takes IPv4 back off clatNIC.
func (s *Stack) stopCLATLocked() {
	if s.tap.clat.Swap(nil) != nil {
		s.setRoutes(s.cfg.Routes)
		s.events.push(Event{Kind: EventCLAT})
	}
}

// clatMTU is the CLAT's IPv4 MTU on a link of MTU mtu.
func (s *Stack) clatMTU(mtu uint32) uint32 {
	return max(mtu, header.IPv4MinimumMTU+clatHeaderDiff) - clatHeaderDiff
}
