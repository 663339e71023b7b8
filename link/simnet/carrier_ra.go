package simnet

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/link/ndp"
	"github.com/mhistack/mhistack/link/radio"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// The carrier's side of the network's IPv6 router (ra.go): with
// CarrierOptions.Network set, an advertiser goroutine (raLoop, started by
// NewCarrierNetwork, stopped by Close) sends each IPv6 session of the
// network its Router Advertisement — at the session's start, every
// RAInterval, after a renumbering, and in answer to a Router
// Solicitation — on the session's place in the data pair; and the
// network drops packets to and from a prefix whose valid lifetime ended.

// minSolicitedGap is the least time between two advertisements to a
// session that a solicitation brings: RFC 4861 §10's
// MIN_DELAY_BETWEEN_RAS. A solicitation within it is answered when it
// has passed.
const minSolicitedGap = 3 * time.Second

// carrierRA is a CarrierNetwork's router state.
type carrierRA struct {
	net    *Network
	detach func()
	kick   chan struct{}
	// solicit has a bit per data session that sent a Router
	// Solicitation not yet answered (set by ingest).
	solicit [4]atomic.Uint64
	// dead are the upper halves of the prefixes no longer routed (nil:
	// none), read per packet.
	dead atomic.Pointer[[]uint64]
	// sent counts the advertisements sent, deadDrops the packets
	// dropped to or from a dead prefix.
	sent, deadDrops atomic.Uint64
}

func (cn *CarrierNetwork) kickRA() {
	select {
	case cn.ra.kick <- struct{}{}:
	default:
	}
}

// solicited notes a Router Solicitation on session (any goroutine).
func (cn *CarrierNetwork) solicited(session uint8) {
	cn.ra.solicit[session/64].Or(1 << (session % 64))
	cn.kickRA()
}

// deadPrefix reports whether the IPv6 address a (16 bytes) is in a
// prefix the network no longer routes. Without one it is a load.
func (r *carrierRA) deadPrefix(a []byte) bool {
	d := r.dead.Load()
	if d == nil {
		return false
	}
	hi := uint64(a[0])<<56 | uint64(a[1])<<48 | uint64(a[2])<<40 | uint64(a[3])<<32 |
		uint64(a[4])<<24 | uint64(a[5])<<16 | uint64(a[6])<<8 | uint64(a[7])
	for _, p := range *d {
		if p == hi {
			return true
		}
	}
	return false
}

func (r *carrierRA) setDead(dead []netip.Prefix) {
	if len(dead) == 0 {
		r.dead.Store(nil)
		return
	}
	d := make([]uint64, len(dead))
	for i, p := range dead {
		a := p.Addr().As16()
		for _, b := range a[:8] {
			d[i] = d[i]<<8 | uint64(b)
		}
	}
	r.dead.Store(&d)
}

// ulDead reports whether the UL IPv6 packet td comes from a dead prefix
// (and counts it).
func (cn *CarrierNetwork) ulDead(td []byte) bool {
	if cn.ra.net == nil || len(td) < header.IPv6MinimumSize || !cn.ra.deadPrefix(td[8:24]) {
		return false
	}
	cn.ra.deadDrops.Add(1)
	return true
}

// dlLive returns pkts without the IPv6 packets to a dead prefix, which
// it releases and counts. Without dead prefixes it returns pkts.
func (cn *CarrierNetwork) dlLive(pkts stack.PacketBufferList) (stack.PacketBufferList, int) {
	r := &cn.ra
	if r.net == nil || r.dead.Load() == nil {
		return pkts, 0
	}
	dead := 0
	for _, pkt := range pkts.AsSlice() {
		if h := pkt.NetworkHeader().Slice(); len(h) >= header.IPv6MinimumSize && header.IPVersion(h) == header.IPv6Version && r.deadPrefix(h[24:40]) {
			dead++
		}
	}
	if dead == 0 {
		return pkts, 0
	}
	var live stack.PacketBufferList
	for _, pkt := range pkts.AsSlice() {
		if h := pkt.NetworkHeader().Slice(); len(h) >= header.IPv6MinimumSize && header.IPVersion(h) == header.IPv6Version && r.deadPrefix(h[24:40]) {
			continue
		}
		live.PushBack(pkt)
	}
	r.deadDrops.Add(uint64(dead))
	return live, dead
}

// raLoop is the advertiser: it asks the network what to advertise when
// woken (a session started, a prefix changed, a solicitation) or when an
// advertisement or a prefix's end is due.
func (cn *CarrierNetwork) raLoop() {
	defer cn.wg.Done()
	last := map[uint8]time.Time{}
	lastGen := ^uint64(0)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var buf []byte
	for {
		now := time.Now()
		plan := cn.ra.net.advertisements(now)
		cn.ra.setDead(plan.dead)
		var wake time.Time
		soon := func(at time.Time) {
			if wake.IsZero() || at.Before(wake) {
				wake = at
			}
		}
		if !plan.expiry.IsZero() {
			soon(plan.expiry)
		}
		var solicit [4]uint64
		for i := range solicit {
			solicit[i] = cn.ra.solicit[i].Swap(0)
		}
		present := map[uint8]bool{}
		for _, s := range plan.sessions {
			present[s.session] = true
			l, ok := last[s.session]
			due := !ok || plan.gen != lastGen || now.Sub(l) >= plan.interval
			if solicit[s.session/64]&(1<<(s.session%64)) != 0 && !due {
				if now.Sub(l) >= minSolicitedGap {
					due = true
				} else {
					// Answered when the gap has passed.
					cn.ra.solicit[s.session/64].Or(1 << (s.session % 64))
					soon(l.Add(minSolicitedGap))
				}
			}
			if due {
				buf = ndp.AppendRouterAdvert(buf[:0], routerLL, ndp.AllNodes, &s.ra)
				cn.sendOwn(s.session, buf)
				cn.ra.sent.Add(1)
				l = now
				last[s.session] = l
			}
			soon(l.Add(plan.interval))
		}
		for s := range last {
			if !present[s] {
				delete(last, s) // ended: its next start is advertised
			}
		}
		lastGen = plan.gen
		if !wake.IsZero() {
			t.Reset(max(time.Until(wake), time.Millisecond))
		}
		select {
		case <-cn.quit:
			return
		case <-cn.ra.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// sendOwn sends a packet the network makes itself (an advertisement) to
// session: across the radio model if there is one, else in a transfer
// of its own (raw IP) or into the DL aggregation. b is copied.
func (cn *CarrierNetwork) sendOwn(session uint8, b []byte) {
	l := cn.ep
	switch {
	case cn.radio != nil:
		_ = cn.radio.Send(radio.Down, uint32(session), b)
	case isRawIP(cn.opts.Framing):
		p := l.port.Load()
		if p == nil || l.send(p, b) != nil {
			cn.stats.dropped.Add(1)
			return
		}
		cn.stats.dl.Add(1)
	default:
		a := &l.agg
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.closed {
			return
		}
		if l.port.Load() == nil {
			cn.stats.dropped.Add(1)
			return
		}
		l.addFramed(&bytesPiece{b: b}, session)
	}
}
