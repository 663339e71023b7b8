package simnet

import (
	"net/netip"
	"slices"
	"time"

	"github.com/mhistack/mhistack/link/ndp"
)

// The network's IPv6 router: what it advertises on each IPv6 session
// and its renumbering. A 3GPP gateway advertises the PDN's /64 on the
// bearer with the A flag set and the L flag clear — the link is point to
// point, the host builds its global address from the prefix and the
// interface identifier NAS gave it (3GPP TS 23.401 §5.3.1.2.2, RFC 6459
// §5.2) — and may add a PREF64 option for the host's CLAT (RFC 8781).
// The state is the Network's, under its lock; each CarrierNetwork given
// the network (CarrierOptions.Network) sends the advertisements on its
// data pair (carrier_ra.go).

// DefaultRAInterval is how often the network advertises unsolicited
// (NetworkConfig.RAInterval): RFC 4861 §6.2.1's default
// MaxRtrAdvInterval.
const DefaultRAInterval = 600 * time.Second

// DefaultRenumberValid is how long a renumbered prefix stays valid
// (RenumberIPv6's oldValid when 0).
const DefaultRenumberValid = 5 * time.Minute

// Lifetimes of a session's current prefix: RFC 4861 §6.2.1's defaults
// AdvValidLifetime (30 days) and AdvPreferredLifetime (7 days).
const (
	raValidLifetime     = 30 * 24 * 3600
	raPreferredLifetime = 7 * 24 * 3600
)

// renumberStep is how many /64s RenumberIPv6 moves a prefix: half of
// the /56 a pool's sessions count up in (Carrier.ForSession), so a
// renumbered session does not land on another session's prefix.
const renumberStep = 0x80

// routerLL is the gateway's link-local address, the source of its
// advertisements (RFC 4861 §4.2).
var routerLL = netip.MustParseAddr("fe80::1")

// maxDeadPrefixes bounds the prefixes the network remembers as ended.
const maxDeadPrefixes = 16

// maxOldPrefixes bounds the deprecated prefixes one session advertises
// at a time (a renumbering faster than oldValid drops the oldest).
const maxOldPrefixes = 4

// raState is the router's state (Network.ra).
type raState struct {
	// gen counts changes every session must hear of at once: a session
	// started, a prefix renumbered.
	gen uint64
	// numbering maps a session's configured /64 (its pool's,
	// Carrier.ForSession) to what it is now, while it was renumbered.
	numbering map[netip.Prefix]*numbering
	// dead are the prefixes whose valid lifetime ended: the network
	// routes them no more.
	dead []netip.Prefix
	// carriers are the data pairs that send the advertisements.
	carriers map[*CarrierNetwork]struct{}
}

// numbering is a session prefix's history: the prefix it has now, and
// the ones it had, deprecated until their valid lifetime ends.
type numbering struct {
	cur netip.Prefix
	old []oldPrefix
}

type oldPrefix struct {
	p     netip.Prefix
	until time.Time
}

// raSession is one IPv6 session and the advertisement it gets now.
type raSession struct {
	session uint8
	ra      ndp.RouterAdvert
}

// raPlan is what a carrier's advertiser does next (Network.advertisements).
type raPlan struct {
	sessions []raSession
	gen      uint64
	interval time.Duration // < 0: no advertisements
	dead     []netip.Prefix
	expiry   time.Time // when a deprecated prefix ends next (zero: none)
}

func prefix64(p netip.Prefix) netip.Prefix {
	q, _ := p.Addr().Prefix(64)
	return q
}

// attachCarrier makes cn send the network's advertisements until the
// returned detach.
func (n *Network) attachCarrier(cn *CarrierNetwork) (detach func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ra.carriers == nil {
		n.ra.carriers = map[*CarrierNetwork]struct{}{}
	}
	n.ra.carriers[cn] = struct{}{}
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.ra.carriers, cn)
	}
}

// raChangedLocked tells the carriers to advertise to every session now:
// a session started, or a prefix changed.
func (n *Network) raChangedLocked() {
	n.ra.gen++
	for cn := range n.ra.carriers {
		cn.kickRA()
	}
}

// ipv6SessionsLocked calls yield for every IPv6 session of the started
// functions: its data session (MBIM session ID, QMAP mux ID) and
// configuration.
func (n *Network) ipv6SessionsLocked(yield func(session uint8, c Carrier)) {
	for _, f := range n.followers {
		f.ipv6SessionsLocked(yield)
	}
}

// pruneLocked moves the deprecated prefixes whose valid lifetime ended
// by now to the dead ones, and returns when the next one ends.
func (n *Network) pruneLocked(now time.Time) (next time.Time) {
	for _, nb := range n.ra.numbering {
		nb.old = slices.DeleteFunc(nb.old, func(o oldPrefix) bool {
			if now.Before(o.until) {
				if next.IsZero() || o.until.Before(next) {
					next = o.until
				}
				return false
			}
			n.ra.dead = append(n.ra.dead, o.p)
			if len(n.ra.dead) > maxDeadPrefixes {
				n.ra.dead = n.ra.dead[1:]
			}
			return true
		})
	}
	return next
}

// advertisements is the router's plan at now: every IPv6 session with
// its advertisement, the prefixes no longer routed, and when a
// deprecated prefix ends next.
func (n *Network) advertisements(now time.Time) raPlan {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := raPlan{gen: n.ra.gen, interval: n.cfg.RAInterval}
	if p.interval == 0 {
		p.interval = DefaultRAInterval
	}
	p.expiry = n.pruneLocked(now)
	p.dead = slices.Clone(n.ra.dead)
	if p.interval < 0 {
		return p
	}
	n.ipv6SessionsLocked(func(session uint8, c Carrier) {
		if c.IPv6.IsValid() {
			p.sessions = append(p.sessions, raSession{session: session, ra: n.advertLocked(c, p.interval, now)})
		}
	})
	return p
}

// advertLocked is the advertisement of a session configured with c:
// its prefix (A set, L clear), the prefixes it had while they are
// valid (preferred lifetime 0), the MTU, and on an APN with a NAT64 its
// prefix.
func (n *Network) advertLocked(c Carrier, interval time.Duration, now time.Time) ndp.RouterAdvert {
	// RFC 4861 §6.2.1: AdvDefaultLifetime is 3 × MaxRtrAdvInterval, at
	// most 9000 s.
	life := min(3*interval, 9000*time.Second)
	ra := ndp.RouterAdvert{HopLimit: 64, RouterLifetime: uint16(life / time.Second), MTU: c.MTU}
	cur := prefix64(c.IPv6)
	var old []oldPrefix
	if nb := n.ra.numbering[cur]; nb != nil {
		cur, old = nb.cur, nb.old
	}
	ra.Prefixes[0] = ndp.PrefixInfo{Prefix: cur, Autonomous: true, ValidLifetime: raValidLifetime, Preferred: raPreferredLifetime}
	ra.NumPrefixes = 1
	for _, o := range old {
		if ra.NumPrefixes == ndp.MaxPrefixes {
			break
		}
		left := uint32((o.until.Sub(now) + time.Second - 1) / time.Second)
		ra.Prefixes[ra.NumPrefixes] = ndp.PrefixInfo{Prefix: o.p, Autonomous: true, ValidLifetime: left}
		ra.NumPrefixes++
	}
	if c.NAT64.IsValid() {
		// RFC 8781 §4.1: by default the lesser of 3 × MaxRtrAdvInterval and
		// what the option can carry.
		ra.PREF64, ra.PREF64Lifetime = c.NAT64, min(3*interval, ndp.MaxPREF64Lifetime)
	}
	return ra
}

// RenumberIPv6 moves every IPv6 session that is up to another /64 while
// the session stays up, as a network renumbering its PDNs does: the
// network advertises the new prefix at once, and the old one with
// preferred lifetime 0 and a valid lifetime of oldValid (0:
// DefaultRenumberValid); it routes both until oldValid has passed, then
// drops packets to and from the old prefix. The sessions are not told
// otherwise: the host learns the prefix from the advertisement alone
// (its interface identifier stays); the IP configuration the host reads
// when it next asks (MBIM IP_CONFIGURATION, QMI runtime settings: at a
// new connection, or after SetCarrier) has the new prefix. It returns the
// new prefixes, one per session.
func (n *Network) RenumberIPv6(oldValid time.Duration) []netip.Prefix {
	if oldValid <= 0 {
		oldValid = DefaultRenumberValid
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	n.pruneLocked(now)
	if n.ra.numbering == nil {
		n.ra.numbering = map[netip.Prefix]*numbering{}
	}
	var out []netip.Prefix
	done := map[netip.Prefix]bool{}
	n.ipv6SessionsLocked(func(_ uint8, c Carrier) {
		if !c.IPv6.IsValid() {
			return
		}
		key := prefix64(c.IPv6)
		if done[key] {
			return // a dual-stack QMI call's other family, or both functions
		}
		done[key] = true
		nb := n.ra.numbering[key]
		if nb == nil {
			nb = &numbering{cur: key}
			n.ra.numbering[key] = nb
		}
		nb.old = append(nb.old, oldPrefix{p: nb.cur, until: now.Add(oldValid)})
		if len(nb.old) > maxOldPrefixes {
			nb.old = nb.old[1:]
		}
		nb.cur, _ = addV6Net(nb.cur.Addr(), renumberStep).Prefix(64)
		out = append(out, nb.cur)
	})
	n.raChangedLocked()
	return out
}

// renumberedLocked returns c with its IPv6 address and gateway moved to
// the /64 its prefix was renumbered to (RenumberIPv6), keeping their
// interface identifiers.
func (n *Network) renumberedLocked(c Carrier) Carrier {
	if !c.IPv6.IsValid() {
		return c
	}
	key := prefix64(c.IPv6)
	nb := n.ra.numbering[key]
	if nb == nil {
		return c
	}
	move := func(a netip.Addr) netip.Addr {
		b, p := a.As16(), nb.cur.Addr().As16()
		copy(b[:8], p[:8])
		return netip.AddrFrom16(b)
	}
	c.IPv6 = netip.PrefixFrom(move(c.IPv6.Addr()), c.IPv6.Bits())
	if c.IPv6Gateway.Is6() && key.Contains(c.IPv6Gateway) {
		c.IPv6Gateway = move(c.IPv6Gateway)
	}
	return c
}
