package simnet

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/link/siit"
)

// NAT64Pool is the IPv4 side of the carrier's NAT64 (RFC 6146): each
// IPv6 host address that sends to a NAT64 prefix is bound to one address
// of it, and the carrier's stack sees that host's flows come from there.
// It is RFC 6598 shared address space, as a carrier-grade NAT uses.
var NAT64Pool = netip.MustParsePrefix("100.64.0.0/22")

// nat64 is the carrier's stateful NAT64 (RFC 6146): a binding
// information base (BIB) that binds an IPv6 host address to an address
// of NAT64Pool, and one SIIT translator (link/siit, RFC 7915) per NAT64
// prefix the APNs name. A binding is made by the first UL packet of a
// host address to a NAT64 prefix and remembers that prefix, so DL to the
// pool address is translated back with it; with the pool used up the
// oldest binding goes. Unlike RFC 6146's BIB, which binds transport
// addresses and translates ports, a binding holds a whole host address
// (there are as many pool addresses as the emulated sessions need), so
// ports pass unchanged.
//
// UL translation runs on the device goroutine (Receive), DL translation
// on the carrier's writers; the BIB is under mu.
type nat64 struct {
	xl []nat64Prefix

	mu    sync.Mutex
	bib   map[[16]byte]nat64Binding
	pool  map[[4]byte][16]byte // pool address → host
	order [][16]byte           // bindings, oldest first
	next  uint32               // the next pool address to try

	translated, refused atomic.Uint64
}

type nat64Binding struct {
	addr   [4]byte
	prefix int // index in xl
}

// nat64Prefix is the translator of one NAT64 prefix; it is the Mapper
// its translator asks.
type nat64Prefix struct {
	n   *nat64
	idx int
	pfx siit.Prefix
	tr  siit.Translator
}

// newNAT64 returns the NAT64 of the carriers that name a prefix, or nil
// if none does.
func newNAT64(carriers []Carrier) (*nat64, error) {
	n := &nat64{bib: map[[16]byte]nat64Binding{}, pool: map[[4]byte][16]byte{}}
	seen := map[netip.Prefix]bool{}
	for _, c := range carriers {
		if !c.NAT64.IsValid() || seen[c.NAT64.Masked()] {
			continue
		}
		p, err := siit.NewPrefix(c.NAT64)
		if err != nil {
			return nil, err
		}
		seen[c.NAT64.Masked()] = true
		n.xl = append(n.xl, nat64Prefix{n: n, idx: len(n.xl), pfx: p})
	}
	if len(n.xl) == 0 {
		return nil, nil
	}
	n.xl = n.xl[:len(n.xl):len(n.xl)]
	for i := range n.xl {
		n.xl[i].tr.Map = &n.xl[i]
	}
	return n, nil
}

// prefixOf returns the translator whose prefix holds the IPv6
// destination of p, or nil.
func (n *nat64) prefixOf(p []byte) *nat64Prefix {
	if len(p) < 40 || p[0]>>4 != 6 {
		return nil
	}
	dst := netip.AddrFrom16([16]byte(p[24:40]))
	for i := range n.xl {
		if n.xl[i].pfx.Prefix().Contains(dst) {
			return &n.xl[i]
		}
	}
	return nil
}

// ul translates the host's IPv6 packet p, sent to a NAT64 prefix, into
// dst; ok false: p is not for the NAT64. A refused packet is counted and
// returns n 0.
func (n *nat64) ul(dst, p []byte) (int, bool) {
	x := n.prefixOf(p)
	if x == nil {
		return 0, false
	}
	m, err := x.tr.To4(dst, p)
	if err != nil {
		n.refused.Add(1)
		return 0, true
	}
	n.translated.Add(1)
	return m, true
}

// dl translates the IPv4 packet p for a pool address into dst; ok false:
// p is not for the NAT64. A refused packet is counted and returns n 0.
func (n *nat64) dl(dst, p []byte) (int, bool) {
	if !owns(p) {
		return 0, false
	}
	n.mu.Lock()
	host, ok := n.pool[[4]byte(p[16:20])]
	b := n.bib[host]
	n.mu.Unlock()
	if !ok {
		n.refused.Add(1)
		return 0, true
	}
	m, err := n.xl[b.prefix].tr.To6(dst, p)
	if err != nil {
		n.refused.Add(1)
		return 0, true
	}
	n.translated.Add(1)
	return m, true
}

// owns reports whether p is an IPv4 packet to a pool address: a DL
// packet for the NAT64.
func owns(p []byte) bool {
	return len(p) >= 20 && p[0]>>4 == 4 && NAT64Pool.Contains(netip.AddrFrom4([4]byte(p[16:20])))
}

// dlGrowth bounds how much longer an IPv6 packet is than the IPv4 packet
// it was translated from: 20 bytes of header, 8 of Fragment header, and
// as much again for the packet inside an ICMP error.
const dlGrowth = 2 * (20 + 8)

// To4 implements siit.Mapper: an address under the prefix is the IPv4
// address it embeds; any other is a host's, bound to a pool address.
func (x *nat64Prefix) To4(a [16]byte) ([4]byte, bool) {
	if x.pfx.Prefix().Contains(netip.AddrFrom16(a)) {
		return x.pfx.Extract(a)
	}
	return x.n.bind(a, x.idx)
}

// To6 implements siit.Mapper: a pool address is its bound host, any
// other IPv4 address is embedded in the prefix.
func (x *nat64Prefix) To6(a [4]byte) ([16]byte, bool) {
	if NAT64Pool.Contains(netip.AddrFrom4(a)) {
		x.n.mu.Lock()
		h, ok := x.n.pool[a]
		x.n.mu.Unlock()
		return h, ok
	}
	return x.pfx.Embed(a)
}

// bind returns host's pool address, binding one (with prefix) if it has
// none.
func (n *nat64) bind(host [16]byte, prefix int) ([4]byte, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if b, ok := n.bib[host]; ok {
		if b.prefix != prefix {
			b.prefix = prefix
			n.bib[host] = b
		}
		return b.addr, true
	}
	size := uint32(1) << (32 - NAT64Pool.Bits())
	if len(n.order) >= int(size)-2 {
		old := n.order[0]
		n.order = n.order[1:]
		delete(n.pool, n.bib[old].addr)
		delete(n.bib, old)
	}
	base := NAT64Pool.Addr().As4()
	for range size {
		n.next = n.next%(size-2) + 1 // neither the network nor the broadcast address
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], binary.BigEndian.Uint32(base[:])+n.next)
		if _, used := n.pool[a]; used {
			continue
		}
		n.bib[host] = nat64Binding{addr: a, prefix: prefix}
		n.pool[a] = host
		n.order = append(n.order, host)
		return a, true
	}
	return [4]byte{}, false
}

// dns64Prefix returns the prefix the DNS64 on server synthesises with:
// that of the carrier whose DNS server it is, IPv4 or IPv6 (the zero
// Prefix if that carrier has no NAT64).
func dns64Prefix(carriers []Carrier, server netip.Addr) siit.Prefix {
	for _, c := range carriers {
		for _, d := range append(append([]netip.Addr(nil), c.IPv4DNS...), c.IPv6DNS...) {
			if d == server && c.NAT64.IsValid() {
				p, _ := siit.NewPrefix(c.NAT64)
				return p
			}
		}
	}
	return siit.Prefix{}
}
