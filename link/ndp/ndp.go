package ndp

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"time"

	"github.com/mhistack/mhistack/internal/csum"
)

// Protocol numbers and message layout (RFC 8200 §3, RFC 4443 §2.1, RFC
// 4861 §4.1 and §4.2).
const (
	ipv6HeaderLen  = 40
	nextHeaderICMP = 58  // ICMPv6
	typeRS         = 133 // Router Solicitation
	typeRA         = 134 // Router Advertisement
	rsLen          = 8   // ICMPv6 header and reserved field
	raLen          = 16  // ICMPv6 header, hop limit, flags, lifetime, reachable, retrans
	hopLimit       = 255 // RFC 4861 §6.1: proof the sender is on the link
)

// Option types (RFC 4861 §4.6, RFC 8781 §4) and their lengths in units
// of 8 bytes.
const (
	optPrefixInfo = 3
	optMTU        = 5
	optPREF64     = 38
	lenPrefixInfo = 4
	lenMTU        = 1
	lenPREF64     = 2
)

// Prefix information flags (RFC 4861 §4.6.2).
const (
	flagOnLink     = 0x80 // L
	flagAutonomous = 0x40 // A
)

// Infinity is the lifetime value meaning "for ever" (RFC 4861 §4.6.2).
const Infinity = ^uint32(0)

// MaxPrefixes is how many prefix information options a parsed Router
// Advertisement keeps; more are ignored (a bearer advertises one, two
// while it renumbers).
const MaxPrefixes = 8

// MaxPREF64Lifetime is the longest PREF64 lifetime the option can carry:
// 13 bits of 8-second units (RFC 8781 §4).
const MaxPREF64Lifetime = 8191 * 8 * time.Second

// AllNodes is ff02::1, where a router sends unsolicited advertisements;
// AllRouters is ff02::2, where a host solicits them.
var (
	AllNodes   = netip.MustParseAddr("ff02::1")
	AllRouters = netip.MustParseAddr("ff02::2")
)

// PrefixInfo is a prefix information option: a prefix the host may
// build addresses in (Autonomous) and whether it is on-link; lifetimes
// in seconds, Infinity for ever.
type PrefixInfo struct {
	Prefix                   netip.Prefix
	OnLink, Autonomous       bool
	ValidLifetime, Preferred uint32
}

// RouterAdvert is a Router Advertisement: the router lifetime (seconds,
// 0: not a default router), the prefixes, the link MTU (0: no option)
// and the NAT64 prefix (RFC 8781; invalid: no option) with its lifetime
// (0 withdraws it).
type RouterAdvert struct {
	HopLimit       uint8
	RouterLifetime uint16
	Prefixes       [MaxPrefixes]PrefixInfo
	NumPrefixes    int
	MTU            uint32
	PREF64         netip.Prefix
	PREF64Lifetime time.Duration
}

// Errors ParseRouterAdvert returns; each wraps ErrInvalid.
var (
	ErrInvalid = errors.New("ndp: invalid router advertisement")
	errShort   = wrap("truncated")
	errNotRA   = wrap("not an ICMPv6 router advertisement")
	errHop     = wrap("hop limit not 255 (sent from off the link)")
	errSource  = wrap("source not link-local")
	errSum     = wrap("bad ICMPv6 checksum")
	errCode    = wrap("ICMP code not 0")
	errOption  = wrap("option of length 0 or beyond the message")
)

type parseError string

func (e parseError) Error() string { return "ndp: router advertisement: " + string(e) }
func (e parseError) Unwrap() error { return ErrInvalid }

func wrap(s string) error { return parseError(s) }

// IsRouterAdvert reports whether the IPv6 packet pkt is an ICMPv6
// Router Advertisement without extension headers (as RFC 4861 messages
// travel): two byte compares, for a receive path to pick them out.
func IsRouterAdvert(pkt []byte) bool {
	return len(pkt) > ipv6HeaderLen && pkt[0]>>4 == 6 && pkt[6] == nextHeaderICMP && pkt[ipv6HeaderLen] == typeRA
}

// IsRouterSolicit is IsRouterAdvert for a Router Solicitation.
func IsRouterSolicit(pkt []byte) bool {
	return len(pkt) > ipv6HeaderLen && pkt[0]>>4 == 6 && pkt[6] == nextHeaderICMP && pkt[ipv6HeaderLen] == typeRS
}

// ParseRouterAdvert validates the IPv6 packet pkt as RFC 4861 §6.1.2
// asks of a host — hop limit 255, link-local source, ICMPv6 checksum,
// code 0, at least 16 bytes of message, every option of non-zero length
// within the message — and returns what it advertises. Options of other
// types, and prefix options beyond MaxPrefixes or with a prefix length
// over 128, are skipped (§4.6: unknown options are ignored).
func ParseRouterAdvert(pkt []byte) (RouterAdvert, error) {
	var ra RouterAdvert
	if len(pkt) < ipv6HeaderLen {
		return ra, errShort
	}
	if !IsRouterAdvert(pkt) {
		return ra, errNotRA
	}
	plen := int(binary.BigEndian.Uint16(pkt[4:6]))
	if plen < raLen || ipv6HeaderLen+plen > len(pkt) {
		return ra, errShort
	}
	if pkt[7] != hopLimit {
		return ra, errHop
	}
	if !netip.AddrFrom16([16]byte(pkt[8:24])).IsLinkLocalUnicast() {
		return ra, errSource
	}
	msg := pkt[ipv6HeaderLen : ipv6HeaderLen+plen]
	if checksum(pkt[8:24], pkt[24:40], msg) != 0xffff {
		return ra, errSum
	}
	if msg[1] != 0 {
		return ra, errCode
	}
	ra.HopLimit = msg[4]
	ra.RouterLifetime = binary.BigEndian.Uint16(msg[6:8])
	// Each turn consumes at least 8 bytes: at most plen/8 turns.
	for opts := msg[raLen:]; len(opts) > 0; {
		if len(opts) < 8 || opts[1] == 0 || int(opts[1])*8 > len(opts) {
			return RouterAdvert{}, errOption
		}
		n := int(opts[1]) * 8
		o := opts[:n]
		opts = opts[n:]
		switch {
		case o[0] == optPrefixInfo && o[1] == lenPrefixInfo:
			bits := int(o[2])
			if bits > 128 || ra.NumPrefixes == MaxPrefixes {
				continue
			}
			p, err := netip.AddrFrom16([16]byte(o[16:32])).Prefix(bits)
			if err != nil {
				continue
			}
			ra.Prefixes[ra.NumPrefixes] = PrefixInfo{Prefix: p,
				OnLink: o[3]&flagOnLink != 0, Autonomous: o[3]&flagAutonomous != 0,
				ValidLifetime: binary.BigEndian.Uint32(o[4:8]), Preferred: binary.BigEndian.Uint32(o[8:12])}
			ra.NumPrefixes++
		case o[0] == optMTU && o[1] == lenMTU:
			ra.MTU = binary.BigEndian.Uint32(o[4:8])
		case o[0] == optPREF64 && o[1] == lenPREF64:
			v := binary.BigEndian.Uint16(o[2:4])
			bits, ok := plcBits(v & 7)
			if !ok {
				continue // a PLC of 6 or 7 codes no length (RFC 8781 §4)
			}
			var a [16]byte
			copy(a[:12], o[4:16])
			ra.PREF64, _ = netip.AddrFrom16(a).Prefix(bits)
			ra.PREF64Lifetime = time.Duration(v>>3) * 8 * time.Second
		}
	}
	return ra, nil
}

// plcBits maps RFC 8781 §4's Prefix Length Code to the prefix length.
func plcBits(plc uint16) (int, bool) {
	switch plc {
	case 0:
		return 96, true
	case 1:
		return 64, true
	case 2:
		return 56, true
	case 3:
		return 48, true
	case 4:
		return 40, true
	case 5:
		return 32, true
	}
	return 0, false
}

// bitsPLC is plcBits' inverse.
func bitsPLC(bits int) (uint16, bool) {
	for plc := range uint16(6) {
		if b, _ := plcBits(plc); b == bits {
			return plc, true
		}
	}
	return 0, false
}

// checksum is the one's complement sum of the ICMPv6 pseudo-header
// (RFC 8200 §8.1) and msg: 0xffff for a message whose checksum is right.
func checksum(src, dst, msg []byte) uint16 {
	var ph [8]byte
	binary.BigEndian.PutUint32(ph[:4], uint32(len(msg)))
	ph[7] = nextHeaderICMP
	s := csum.Checksum(src, 0)
	s = csum.Checksum(dst, s)
	s = csum.Checksum(ph[:], s)
	return csum.Checksum(msg, s)
}

// appendIPv6 appends an IPv6 header from src to dst with hop limit 255
// for an ICMPv6 message of n bytes.
func appendIPv6(b []byte, src, dst netip.Addr, n int) []byte {
	var h [ipv6HeaderLen]byte
	h[0] = 6 << 4
	binary.BigEndian.PutUint16(h[4:6], uint16(n))
	h[6], h[7] = nextHeaderICMP, hopLimit
	s, d := src.As16(), dst.As16()
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
	return append(b, h[:]...)
}

// finish fills in the checksum of the ICMPv6 message after the IPv6
// header at b[start:].
func finish(b []byte, start int) []byte {
	p := b[start:]
	msg := p[ipv6HeaderLen:]
	msg[2], msg[3] = 0, 0
	binary.BigEndian.PutUint16(msg[2:4], ^checksum(p[8:24], p[24:40], msg))
	return b
}

// AppendRouterAdvert appends ra as an IPv6 packet from src (the
// router's link-local address) to dst (AllNodes, or the soliciting
// host): hop limit 255, the prefixes with their flags and lifetimes, an
// MTU option when ra.MTU is set and a PREF64 option when ra.PREF64 is
// valid with a length RFC 8781 can code (its lifetime rounded up to 8
// seconds, at most MaxPREF64Lifetime, as RFC 8781 §4.1 says).
func AppendRouterAdvert(b []byte, src, dst netip.Addr, ra *RouterAdvert) []byte {
	n := raLen + ra.NumPrefixes*lenPrefixInfo*8
	if ra.MTU != 0 {
		n += lenMTU * 8
	}
	plc, pref64 := bitsPLC(ra.PREF64.Bits())
	pref64 = pref64 && ra.PREF64.Addr().Is6()
	if pref64 {
		n += lenPREF64 * 8
	}
	start := len(b)
	b = appendIPv6(b, src, dst, n)
	var h [raLen]byte
	h[0] = typeRA
	h[4] = ra.HopLimit
	binary.BigEndian.PutUint16(h[6:8], ra.RouterLifetime)
	b = append(b, h[:]...)
	for _, p := range ra.Prefixes[:min(ra.NumPrefixes, MaxPrefixes)] {
		var o [lenPrefixInfo * 8]byte
		o[0], o[1], o[2] = optPrefixInfo, lenPrefixInfo, byte(p.Prefix.Bits())
		if p.OnLink {
			o[3] |= flagOnLink
		}
		if p.Autonomous {
			o[3] |= flagAutonomous
		}
		binary.BigEndian.PutUint32(o[4:8], p.ValidLifetime)
		binary.BigEndian.PutUint32(o[8:12], p.Preferred)
		a := p.Prefix.Masked().Addr().As16()
		copy(o[16:32], a[:])
		b = append(b, o[:]...)
	}
	if ra.MTU != 0 {
		var o [lenMTU * 8]byte
		o[0], o[1] = optMTU, lenMTU
		binary.BigEndian.PutUint32(o[4:8], ra.MTU)
		b = append(b, o[:]...)
	}
	if pref64 {
		var o [lenPREF64 * 8]byte
		o[0], o[1] = optPREF64, lenPREF64
		life := min((ra.PREF64Lifetime+8*time.Second-1)/(8*time.Second), 8191)
		binary.BigEndian.PutUint16(o[2:4], uint16(life)<<3|plc)
		a := ra.PREF64.Masked().Addr().As16()
		copy(o[4:16], a[:12])
		b = append(b, o[:]...)
	}
	return finish(b, start)
}

// AppendRouterSolicit appends a Router Solicitation from src (the
// host's link-local address, or :: before it has one) to AllRouters.
func AppendRouterSolicit(b []byte, src netip.Addr) []byte {
	start := len(b)
	b = appendIPv6(b, src, AllRouters, rsLen)
	b = append(b, typeRS, 0, 0, 0, 0, 0, 0, 0)
	return finish(b, start)
}

// SolicitSource returns the source of the Router Solicitation pkt
// (IsRouterSolicit) if it is one a router answers (RFC 4861 §6.1.1: hop
// limit 255, right checksum, code 0, at least 8 bytes); the unspecified
// address is a valid source.
func SolicitSource(pkt []byte) (netip.Addr, bool) {
	if !IsRouterSolicit(pkt) {
		return netip.Addr{}, false
	}
	plen := int(binary.BigEndian.Uint16(pkt[4:6]))
	if plen < rsLen || ipv6HeaderLen+plen > len(pkt) || pkt[7] != hopLimit {
		return netip.Addr{}, false
	}
	msg := pkt[ipv6HeaderLen : ipv6HeaderLen+plen]
	if msg[1] != 0 || checksum(pkt[8:24], pkt[24:40], msg) != 0xffff {
		return netip.Addr{}, false
	}
	return netip.AddrFrom16([16]byte(pkt[8:24])), true
}
