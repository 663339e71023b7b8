package siit

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/mhistack/mhistack/internal/csum"
)

// Mapper maps addresses between the two families. It is asked for both
// addresses of a packet, and for those of the packet inside an ICMP
// error (which travelled the other way), so a mapping must be one
// bijection used in both directions. A false result refuses the packet.
type Mapper interface {
	To6(a [4]byte) ([16]byte, bool)
	To4(a [16]byte) ([4]byte, bool)
}

// Translator translates packets with the addresses of Map. The zero
// value with Map set is ready; it may be used from many goroutines.
type Translator struct {
	Map Mapper
	// ids numbers the IPv4 packets made from unfragmented IPv6 ones
	// (RFC 7915 §5.1, Identification).
	ids atomic.Uint32
}

// Protocol numbers and sizes (RFC 791, RFC 8200, RFC 792, RFC 4443).
const (
	ipv4Min      = 20
	ipv6Len      = 40
	fragHdrLen   = 8 // RFC 8200 §4.5
	protoICMP    = 1
	protoTCP     = 6
	protoUDP     = 17
	protoICMPv6  = 58
	nhHopByHop   = 0
	nhRouting    = 43
	nhFragment   = 44
	nhDestOpts   = 60
	maxExtHdrs   = 8    // bound on the IPv6 extension header walk
	dfLimit4     = 1260 // RFC 7915 §5.1: DF is set above this IPv4 size
	maxICMPv6Err = 1280 // RFC 4443 §2.4(c): an ICMPv6 error fits the minimum MTU
)

// dummy4 is the IPv4 dummy address 192.0.0.8 (RFC 7600, the IANA IPv4
// special-purpose registry): the source of an ICMPv4 error whose IPv6
// source has no IPv4 address (a router's, say).
var dummy4 = [4]byte{192, 0, 0, 8}

// Reasons for refusing a packet; preallocated so that refusing costs no
// allocation either.
var (
	errV4Header    = fmt.Errorf("%w: bad IPv4 header", ErrMalformed)
	errV4Checksum  = fmt.Errorf("%w: bad IPv4 header checksum", ErrMalformed)
	errV6Header    = fmt.Errorf("%w: bad IPv6 header", ErrMalformed)
	errExtHeader   = fmt.Errorf("%w: bad IPv6 extension header", ErrMalformed)
	errTransport   = fmt.Errorf("%w: transport header cut short", ErrMalformed)
	errICMPSum     = fmt.Errorf("%w: bad ICMP checksum", ErrMalformed)
	errSourceRoute = fmt.Errorf("%w: IPv4 source route option (RFC 7915 §4.1)", ErrDrop)
	errRouting     = fmt.Errorf("%w: routing header with segments left (RFC 7915 §5.1)", ErrDrop)
	errTwoFrags    = fmt.Errorf("%w: second fragment header", ErrDrop)
	errICMPFrag    = fmt.Errorf("%w: fragmented ICMP (RFC 7915 §1.3)", ErrDrop)
	errICMPType    = fmt.Errorf("%w: ICMP type or code with no translation (RFC 7915 §4.2, §5.2)", ErrDrop)
	errWrongICMP   = fmt.Errorf("%w: ICMP of the other family (RFC 7915 §4.1, §5.1)", ErrDrop)
	errUDPZero     = fmt.Errorf("%w: fragmented UDP without checksum (RFC 7915 §4.5)", ErrDrop)
	errUDPZero6    = fmt.Errorf("%w: IPv6 UDP without checksum (RFC 8200 §8.1)", ErrDrop)
	errJumbo       = fmt.Errorf("%w: jumbogram", ErrDrop)
	errTooBig      = fmt.Errorf("%w: longer than an IPv4 packet can be", ErrDrop)
	errNested      = fmt.Errorf("%w: ICMP error inside an ICMP error", ErrDrop)
	errSrc         = fmt.Errorf("%w: source", ErrAddress)
	errDst         = fmt.Errorf("%w: destination", ErrAddress)
)

// To6 translates the IPv4 packet p into dst and returns the length of
// the IPv6 packet (RFC 7915 §4). TTL is decremented, as a router does:
// a packet that arrives with TTL 1 or 0 fails with ErrTTL. The IPv6
// packet is 20 bytes longer than p, 28 if p is a fragment (a Fragment
// header is added).
func (t *Translator) To6(dst, p []byte) (int, error) { return t.to6(dst, p, false) }

// To4 translates the IPv6 packet p into dst and returns the length of
// the IPv4 packet (RFC 7915 §5). The hop limit is decremented as in
// To6. Extension headers are removed; a Fragment header becomes the
// IPv4 fragment fields.
func (t *Translator) To4(dst, p []byte) (int, error) { return t.to4(dst, p, false) }

// to6 translates an IPv4 packet; inner is the packet inside an ICMP
// error, which may be cut short and whose lengths are kept as they are.
func (t *Translator) to6(dst, p []byte, inner bool) (int, error) {
	if len(p) < ipv4Min || p[0]>>4 != 4 {
		return 0, errV4Header
	}
	ihl := int(p[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(p[2:]))
	if ihl < ipv4Min || ihl > len(p) || total < ihl {
		return 0, errV4Header
	}
	if !inner {
		if total > len(p) {
			return 0, errV4Header
		}
		p = p[:total]
		if ^csum.Checksum(p[:ihl], 0) != 0 {
			return 0, errV4Checksum
		}
	} else if total < len(p) {
		p = p[:total]
	}
	if err := checkOptions4(p[20:ihl]); err != nil {
		return 0, err
	}
	ttl := p[8]
	if !inner {
		if ttl <= 1 {
			return 0, ErrTTL
		}
		ttl--
	}
	ff := binary.BigEndian.Uint16(p[6:])
	more, off := ff&0x2000 != 0, int(ff&0x1fff)*8
	frag := more || off != 0
	proto := p[9]
	switch proto {
	case protoICMPv6:
		return 0, errWrongICMP
	case protoICMP:
		if frag {
			return 0, errICMPFrag
		}
	}
	var src4, dst4 [4]byte
	copy(src4[:], p[12:16])
	copy(dst4[:], p[16:20])
	src6, ok := t.Map.To6(src4)
	if !ok {
		return 0, errSrc
	}
	dst6, ok := t.Map.To6(dst4)
	if !ok {
		return 0, errDst
	}
	hl := ipv6Len
	if frag {
		hl += fragHdrLen
	}
	payload := p[ihl:]
	if len(dst) < hl+len(payload) {
		return 0, ErrShort
	}
	out := dst[hl : hl+len(payload)]
	n := len(payload)
	nh := proto
	switch {
	case proto == protoICMP:
		nh = protoICMPv6
		var err error
		if n, err = t.icmp4to6(dst[hl:], payload, &src6, &dst6, total-ihl, inner); err != nil {
			return 0, err
		}
	default:
		copy(out, payload)
		if off == 0 {
			if err := fixPorts(out, proto, src4[:], dst4[:], src6[:], dst6[:], frag, inner); err != nil {
				return 0, err
			}
		}
	}
	// Payload Length: of the packet sent; inside an error, the one the
	// original IPv4 header declared.
	plen := hl - ipv6Len + n
	if inner {
		plen = hl - ipv6Len + total - ihl
	}
	h := dst[:ipv6Len]
	// Traffic Class is the IPv4 TOS, Flow Label zero (RFC 7915 §4.1).
	binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(p[1])<<20)
	binary.BigEndian.PutUint16(h[4:], uint16(plen))
	h[6] = nh
	h[7] = ttl
	copy(h[8:24], src6[:])
	copy(h[24:40], dst6[:])
	if frag {
		h[6] = nhFragment
		f := dst[ipv6Len:hl]
		f[0], f[1] = nh, 0
		m := uint16(0)
		if more {
			m = 1
		}
		binary.BigEndian.PutUint16(f[2:], uint16(off)|m)
		// The 16-bit IPv4 Identification in the low bits (RFC 7915 §4.1).
		binary.BigEndian.PutUint32(f[4:], uint32(binary.BigEndian.Uint16(p[4:])))
	}
	return hl + n, nil
}

// checkOptions4 refuses a source route option (RFC 7915 §4.1); other
// options are dropped in translation.
func checkOptions4(o []byte) error {
	for len(o) > 0 {
		switch o[0] {
		case 0: // end of options
			return nil
		case 1: // no operation
			o = o[1:]
			continue
		case 131, 137: // loose and strict source route (RFC 791)
			return errSourceRoute
		}
		if len(o) < 2 || int(o[1]) < 2 || int(o[1]) > len(o) {
			return errV4Header
		}
		o = o[o[1]:]
	}
	return nil
}

// to4 translates an IPv6 packet; inner as in to6.
func (t *Translator) to4(dst, p []byte, inner bool) (int, error) {
	if len(p) < ipv6Len || p[0]>>4 != 6 {
		return 0, errV6Header
	}
	plen := int(binary.BigEndian.Uint16(p[4:]))
	if !inner {
		if plen == 0 {
			return 0, errJumbo
		}
		if ipv6Len+plen > len(p) {
			return 0, errV6Header
		}
		p = p[:ipv6Len+plen]
	} else if ipv6Len+plen < len(p) {
		p = p[:ipv6Len+plen]
	}
	hop := p[7]
	if !inner {
		if hop <= 1 {
			return 0, ErrTTL
		}
		hop--
	}
	nh, at := p[6], ipv6Len
	frag, more, off, id := false, false, 0, uint32(0)
walk:
	for range maxExtHdrs {
		switch nh {
		case nhHopByHop, nhDestOpts, nhRouting:
			if at+8 > len(p) {
				return 0, errExtHeader
			}
			l := (int(p[at+1]) + 1) * 8
			if at+l > len(p) {
				return 0, errExtHeader
			}
			if nh == nhRouting && p[at+3] != 0 {
				return 0, errRouting
			}
			nh, at = p[at], at+l
		case nhFragment:
			if frag {
				return 0, errTwoFrags
			}
			if at+fragHdrLen > len(p) {
				return 0, errExtHeader
			}
			v := binary.BigEndian.Uint16(p[at+2:])
			frag, more, off = true, v&1 != 0, int(v&^7)
			id = binary.BigEndian.Uint32(p[at+4:])
			nh, at = p[at], at+fragHdrLen
		default:
			break walk
		}
	}
	switch nh {
	case nhHopByHop, nhDestOpts, nhRouting, nhFragment:
		return 0, errExtHeader // more than maxExtHdrs
	case protoICMP:
		return 0, errWrongICMP
	case protoICMPv6:
		if frag {
			return 0, errICMPFrag
		}
	}
	var src6, dst6 [16]byte
	copy(src6[:], p[8:24])
	copy(dst6[:], p[24:40])
	src4, ok := t.Map.To4(src6)
	if !ok {
		// A router's error has an IPv4 source all the same: the
		// dummy address.
		if inner || nh != protoICMPv6 || len(p) <= at || p[at] >= 128 {
			return 0, errSrc
		}
		src4 = dummy4
	}
	dst4, ok := t.Map.To4(dst6)
	if !ok {
		return 0, errDst
	}
	payload := p[at:]
	if len(dst) < ipv4Min+len(payload) {
		return 0, ErrShort
	}
	n := len(payload)
	proto := nh
	if nh == protoICMPv6 {
		proto = protoICMP
		var err error
		if n, err = t.icmp6to4(dst[ipv4Min:], payload, &src6, &dst6, plen-(at-ipv6Len), inner); err != nil {
			return 0, err
		}
	} else {
		out := dst[ipv4Min : ipv4Min+n]
		copy(out, payload)
		if off == 0 {
			if err := fixPorts(out, proto, src6[:], dst6[:], src4[:], dst4[:], false, inner); err != nil {
				return 0, err
			}
		}
	}
	total := ipv4Min + n
	if total > 0xffff {
		return 0, errTooBig
	}
	if inner {
		total = ipv4Min + plen - (at - ipv6Len)
	}
	h := dst[:ipv4Min]
	h[0] = 4<<4 | 5
	h[1] = byte(binary.BigEndian.Uint16(p[0:]) >> 4) // Traffic Class
	binary.BigEndian.PutUint16(h[2:], uint16(total))
	var ff uint16
	switch {
	case frag:
		binary.BigEndian.PutUint16(h[4:], uint16(id))
		ff = uint16(off / 8)
		if more {
			ff |= 0x2000
		}
	default:
		binary.BigEndian.PutUint16(h[4:], uint16(t.ids.Add(1)))
		if total > dfLimit4 {
			ff = 0x4000
		}
	}
	binary.BigEndian.PutUint16(h[6:], ff)
	h[8] = hop
	h[9] = proto
	h[10], h[11] = 0, 0
	copy(h[12:16], src4[:])
	copy(h[16:20], dst4[:])
	binary.BigEndian.PutUint16(h[10:], ^csum.Checksum(h, 0))
	return ipv4Min + n, nil
}

// fixPorts adjusts the TCP or UDP checksum of the transport header at
// the start of seg for the new addresses (RFC 7915 §4.5, §5.5; RFC 1624
// incremental update). Other protocols pass unchanged. An IPv4 UDP
// datagram without a checksum gets one, unless it is a fragment (refused)
// or inside an error (kept).
func fixPorts(seg []byte, proto byte, os, od, ns, nd []byte, frag, inner bool) error {
	var at int
	switch proto {
	case protoTCP:
		at = 16
	case protoUDP:
		at = 6
	default:
		return nil
	}
	if len(seg) < at+2 {
		if inner {
			return nil
		}
		return errTransport
	}
	old := binary.BigEndian.Uint16(seg[at:])
	if proto == protoUDP && old == 0 {
		switch {
		case inner:
			return nil
		case len(os) == 16:
			return errUDPZero6
		case frag:
			return errUDPZero
		}
		// RFC 7915 §4.5: compute the checksum the IPv6 datagram needs.
		if len(seg) < 8 || int(binary.BigEndian.Uint16(seg[4:])) != len(seg) {
			return errTransport
		}
		s := pseudo(ns, nd, uint32(len(seg)), protoUDP)
		c := ^csum.Checksum(seg, fold(s))
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(seg[at:], c)
		return nil
	}
	c := adjust(old, sum16(os)+sum16(od), sum16(ns)+sum16(nd))
	if proto == protoUDP && c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(seg[at:], c)
	return nil
}

// sum16 is the unfolded sum of b's big-endian 16-bit words (len(b) even).
func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	return s
}

// fold reduces an unfolded one's complement sum to 16 bits.
func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// adjust returns checksum c after words summing to old were replaced by
// words summing to new (RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')).
func adjust(c uint16, old, new uint32) uint16 {
	return ^fold(uint32(^c) + uint32(^fold(old)) + uint32(fold(new)))
}

// pseudo is the unfolded sum of a pseudo-header (RFC 8200 §8.1; for
// IPv4, RFC 793) with addresses src and dst.
func pseudo(src, dst []byte, length uint32, proto byte) uint32 {
	return sum16(src) + sum16(dst) + length>>16 + length&0xffff + uint32(proto)
}

var errSplit = fmt.Errorf("%w: cannot split into two fragments within the MTU", ErrDrop)

// SplitFragment cuts p, an IPv6 fragment longer than mtu with its
// Fragment header right after the IPv6 header (what To6 makes of an IPv4
// fragment, 28 bytes longer than it), into two fragments of the same
// packet: p[:n] and dst[:m], each at most mtu bytes (RFC 8200 §4.5: the
// first piece's length a multiple of 8, M set on it). A translator
// splits rather than drops what the IPv4 sender cut for an MTU 20 bytes
// larger than the IPv6 path's (RFC 7915 §4.1 lets it fragment).
func SplitFragment(dst, p []byte, mtu int) (n, m int, err error) {
	const hl = ipv6Len + fragHdrLen
	if len(p) <= mtu {
		return len(p), 0, nil
	}
	if len(p) < hl || p[0]>>4 != 6 || p[6] != nhFragment || mtu < hl+8 {
		return 0, 0, errSplit
	}
	k := (mtu - hl) &^ 7
	rest := len(p) - hl - k
	if rest <= 0 || hl+rest > mtu || len(dst) < hl+rest {
		return 0, 0, errSplit
	}
	v := binary.BigEndian.Uint16(p[ipv6Len+2:])
	copy(dst, p[:hl])
	copy(dst[hl:], p[hl+k:])
	binary.BigEndian.PutUint16(dst[4:], uint16(fragHdrLen+rest))
	binary.BigEndian.PutUint16(dst[ipv6Len+2:], (v&^7)+uint16(k)|v&1)
	binary.BigEndian.PutUint16(p[4:], uint16(fragHdrLen+k))
	binary.BigEndian.PutUint16(p[ipv6Len+2:], v|1)
	return hl + k, hl + rest, nil
}
