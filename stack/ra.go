package stack

import (
	"net/netip"
	"slices"
	"time"

	"github.com/mhistack/mhistack/link/ndp"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Router Advertisements from the network. A 3GPP network advertises the
// session's /64 on the bearer (A set, L clear: RFC 6459 §5.2, 3GPP TS
// 23.401 §5.3.1.2.2), and may add the link MTU and a PREF64 (RFC 8781).
// The stack reads them in the tap (tap.DeliverNetworkPacket picks out
// ICMPv6 type 134 by two byte compares) and
//
//   - adds prefix + the session's interface identifier for a new /64
//     with the A flag, deprecates an address whose preferred lifetime
//     ends (gVisor then picks it as a source for no new connection,
//     RFC 6724 §5 rule 3) and removes it when its valid lifetime ends,
//     which resets the TCP connections still on it (SetAddresses);
//   - follows the MTU option within 1280 and the session's MTU;
//   - gives a PREF64 to the CLAT, before RFC 7050 discovery (RFC 9872);
//     lifetime 0 withdraws it.
//
// Not gVisor's NDP, which the stack leaves off (ipv6.Options'
// NDPConfigs is zero: HandleRAs disabled, no solicitations): its SLAAC
// builds interface identifiers from a link address (EUI-64) or RFC 7217
// opaque ones, not the identifier the session gave; its addresses would
// live beside Stack.addrs, so Addresses, Events and the reset of
// connections on removal would not see them; and it reads neither the
// MTU nor the PREF64 option.
//
// RFC 4862 §5.5.3 e)'s two-hour rule (an advertisement may not cut an
// address's remaining valid lifetime below two hours) is not applied:
// it guards a shared link against forged advertisements, and a bearer
// is a point-to-point link on which only the network's gateway can send
// — the case the rule exempts as authenticated. So a network that
// renumbers can end the old prefix in minutes rather than hours (RFC
// 8978 describes what the floor costs in a renumbering).

// maxRAPrefixes bounds the prefixes the stack follows; further new ones
// are ignored until one ends.
const maxRAPrefixes = 8

// maxEndedPrefixes bounds the session prefixes remembered as ended.
const maxEndedPrefixes = 8

// raPrefix is an advertised /64 and its lifetimes (zero: for ever).
type raPrefix struct {
	p                          netip.Prefix
	preferredUntil, validUntil time.Time
}

func (r *raPrefix) deprecated(now time.Time) bool {
	return !r.preferredUntil.IsZero() && !now.Before(r.preferredUntil)
}

// raState is what the stack learned from advertisements, under
// Stack.mu.
type raState struct {
	// cfg is the session's addresses (SetAddresses, link-local added).
	cfg      []netip.Prefix
	prefixes []raPrefix
	// ended are /64s whose valid lifetime ended: a session address in
	// one is gone too.
	ended []netip.Prefix
	timer *time.Timer
	// pref64 is the advertised NAT64 prefix until pref64Until.
	pref64      netip.Prefix
	pref64Until time.Time
	// mtu is the session's MTU (SetMTU), the most an advertisement may
	// set.
	mtu uint32
}

// until is now plus a lifetime in seconds (zero for Infinity).
func until(now time.Time, secs uint32) time.Time {
	if secs == ndp.Infinity {
		return time.Time{}
	}
	return now.Add(time.Duration(secs) * time.Second)
}

func prefix64(a netip.Addr) netip.Prefix {
	p, _ := a.Prefix(64)
	return p
}

// isRouterAdvert reports whether the IPv6 packet pkt, as the link
// delivers it, is an ICMPv6 Router Advertisement.
func isRouterAdvert(pkt *gstack.PacketBuffer) bool {
	if h := pkt.NetworkHeader().Slice(); len(h) >= header.IPv6MinimumSize {
		if h[6] != uint8(header.ICMPv6ProtocolNumber) {
			return false
		}
		b, ok := pkt.Data().PullUp(1)
		return ok && b[0] == uint8(header.ICMPv6RouterAdvert)
	}
	b, ok := pkt.Data().PullUp(header.IPv6MinimumSize + 1)
	return ok && ndp.IsRouterAdvert(b)
}

// routerAdvert takes a Router Advertisement from the link (the tap, on
// the link's delivery goroutine).
func (s *Stack) routerAdvert(pkt *gstack.PacketBuffer) {
	b := append(slices.Clone(pkt.NetworkHeader().Slice()), pkt.Data().AsRange().ToSlice()...)
	ra, err := ndp.ParseRouterAdvert(b)
	if err != nil {
		s.counters.raBad.Add(1)
		s.log.Debug("stack: router advertisement dropped", "err", err)
		return
	}
	s.counters.ra.Add(1)
	s.takeRouterAdvert(&ra, time.Now())
}

// takeRouterAdvert applies a valid advertisement received at now.
func (s *Stack) takeRouterAdvert(ra *ndp.RouterAdvert, now time.Time) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	st := &s.ra
	for _, pi := range ra.Prefixes[:ra.NumPrefixes] {
		// RFC 4862 §5.5.3: autonomous, not link-local, preferred
		// within valid; the interface identifier is 64 bits, so only
		// a /64 makes addresses.
		if !pi.Autonomous || pi.Prefix.Bits() != 64 || pi.Prefix.Addr().IsLinkLocalUnicast() || pi.Preferred > pi.ValidLifetime {
			continue
		}
		i := slices.IndexFunc(st.prefixes, func(r raPrefix) bool { return r.p == pi.Prefix })
		if i < 0 {
			if pi.ValidLifetime == 0 || len(st.prefixes) == maxRAPrefixes {
				continue
			}
			st.prefixes = append(st.prefixes, raPrefix{p: pi.Prefix})
			i = len(st.prefixes) - 1
			st.ended = slices.DeleteFunc(st.ended, func(p netip.Prefix) bool { return p == pi.Prefix })
		}
		st.prefixes[i].preferredUntil = until(now, pi.Preferred)
		if pi.Preferred == 0 {
			st.prefixes[i].preferredUntil = now
		}
		st.prefixes[i].validUntil = until(now, pi.ValidLifetime)
		if pi.ValidLifetime == 0 {
			st.prefixes[i].validUntil = now
		}
	}
	clat := false
	if ra.PREF64.IsValid() {
		switch {
		case ra.PREF64Lifetime == 0:
			if st.pref64 == ra.PREF64 {
				st.pref64, clat = netip.Prefix{}, true
			}
		default:
			clat = st.pref64 != ra.PREF64
			st.pref64, st.pref64Until = ra.PREF64, now.Add(ra.PREF64Lifetime)
		}
	}
	var mtu uint32
	if ra.MTU >= header.IPv6MinimumMTU {
		mtu = ra.MTU
		if st.mtu != 0 {
			mtu = min(mtu, st.mtu)
		}
	}
	changed, c2, err := s.raUpdateLocked(now)
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("stack: advertised addresses not applied", "err", err)
	}
	if mtu != 0 {
		s.setLinkMTU(mtu)
	}
	s.raFollow(changed, clat || c2)
}

// raUpdateLocked ends what has expired by now, applies the addresses
// and arms the timer for the next expiry. It reports whether the
// addresses changed and whether the PREF64 ended.
func (s *Stack) raUpdateLocked(now time.Time) (addrs, pref64 bool, err error) {
	st := &s.ra
	st.prefixes = slices.DeleteFunc(st.prefixes, func(r raPrefix) bool {
		if r.validUntil.IsZero() || now.Before(r.validUntil) {
			return false
		}
		st.ended = append(st.ended, r.p)
		if len(st.ended) > maxEndedPrefixes {
			st.ended = st.ended[1:]
		}
		return true
	})
	if st.pref64.IsValid() && !now.Before(st.pref64Until) {
		st.pref64, pref64 = netip.Prefix{}, true
	}
	before := slices.Clone(s.addrs)
	err = s.applyAddrsLocked(s.effectiveAddrsLocked(now))
	addrs = !slices.Equal(before, s.addrs)
	var next time.Time
	soon := func(t time.Time) {
		if !t.IsZero() && now.Before(t) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, r := range st.prefixes {
		soon(r.preferredUntil)
		soon(r.validUntil)
	}
	if st.pref64.IsValid() {
		soon(st.pref64Until)
	}
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	if !next.IsZero() && !s.closed {
		st.timer = time.AfterFunc(next.Sub(now), s.raExpire)
	}
	return addrs, pref64, err
}

// raExpire runs when an advertised lifetime ends (the timer's
// goroutine; Close stops the timer).
func (s *Stack) raExpire() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	addrs, pref64, err := s.raUpdateLocked(time.Now())
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("stack: advertised addresses not applied", "err", err)
	}
	s.raFollow(addrs, pref64)
}

// raFollow moves the CLAT after a change: to the PREF64 when it
// changed, to a preferred address when the addresses did.
func (s *Stack) raFollow(addrs, pref64 bool) {
	if pref64 {
		s.mu.Lock()
		s.clatFor = netip.Addr{} // run it again, with the new prefix
		if c := s.tap.clat.Load(); c != nil && c.pfx.Prefix() != s.ra.pref64 && !s.cfg.NAT64Prefix.IsValid() {
			// Not the network's prefix (any more): no translation
			// with it until discovery finds one.
			s.stopCLATLocked()
		}
		s.mu.Unlock()
	}
	if addrs || pref64 {
		s.followCLAT(s.Addresses())
	}
}

// effectiveAddrsLocked is the session's addresses without those in an
// ended /64, plus prefix + interface identifier for each advertised
// prefix, and which of them are deprecated; preferred addresses come
// first, so the CLAT (wantCLAT) takes one of them.
func (s *Stack) effectiveAddrsLocked(now time.Time) (out []netip.Prefix, dep []netip.Addr) {
	st := &s.ra
	find := func(a netip.Addr) *raPrefix {
		for i := range st.prefixes {
			if st.prefixes[i].p.Contains(a) {
				return &st.prefixes[i]
			}
		}
		return nil
	}
	var iid [8]byte
	haveIID := false
	for _, p := range st.cfg {
		a := p.Addr()
		if !a.Is6() {
			out = append(out, p)
			continue
		}
		if b := a.As16(); !haveIID && [8]byte(b[8:]) != ([8]byte{}) {
			iid, haveIID = [8]byte(b[8:]), true
		}
		if a.IsLinkLocalUnicast() {
			out = append(out, p)
			continue
		}
		if slices.Contains(st.ended, prefix64(a)) {
			continue
		}
		if r := find(a); r != nil && r.deprecated(now) {
			dep = append(dep, a)
		}
		out = append(out, p)
	}
	if haveIID {
		for i := range st.prefixes {
			r := &st.prefixes[i]
			b := r.p.Addr().As16()
			copy(b[8:], iid[:])
			a := netip.AddrFrom16(b)
			if slices.ContainsFunc(out, func(p netip.Prefix) bool { return p.Addr() == a }) {
				continue
			}
			out = append(out, netip.PrefixFrom(a, 64))
			if r.deprecated(now) {
				dep = append(dep, a)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b netip.Prefix) int {
		da, db := slices.Contains(dep, a.Addr()), slices.Contains(dep, b.Addr())
		switch {
		case da == db:
			return 0
		case db:
			return -1
		}
		return 1
	})
	return out, dep
}

// setLinkMTU sets the NIC's MTU from an advertisement.
func (s *Stack) setLinkMTU(mtu uint32) {
	if s.tap.MTU() == mtu {
		return
	}
	s.applyMTU(mtu)
}

// pref64 is the advertised NAT64 prefix, if one is in force.
func (s *Stack) pref64() netip.Prefix {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ra.pref64
}

// solicitRouter sends a Router Solicitation (RFC 4861 §6.3.7) from the
// link-local address, so that the network advertises at once what it
// has for a new session.
func (s *Stack) solicitRouter() {
	var src netip.Addr
	s.mu.Lock()
	for _, p := range s.addrs {
		if p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			src = p.Addr()
			break
		}
	}
	s.mu.Unlock()
	if !src.IsValid() {
		return
	}
	var l gstack.PacketBufferList
	l.PushBack(ipv6Packet(ndp.AppendRouterSolicit(nil, src)))
	s.tap.WritePackets(l)
	l.DecRef()
}

// applyDeprecationLocked marks the addresses in dep deprecated on the
// NIC and the other IPv6 addresses preferred.
func (s *Stack) applyDeprecationLocked(dep []netip.Addr) {
	for _, p := range s.addrs {
		a := p.Addr()
		if !a.Is6() || a.IsLinkLocalUnicast() {
			continue
		}
		_ = s.gs.SetAddressLifetimes(nicID, tcpip.AddrFrom16(a.As16()), gstack.AddressLifetimes{Deprecated: slices.Contains(dep, a)})
	}
}
