package siit

import (
	"errors"
	"fmt"
	"net/netip"
)

// WellKnownPrefix is 64:ff9b::/96, the RFC 6052 §2.1 Well-Known Prefix.
var WellKnownPrefix = netip.MustParsePrefix("64:ff9b::/96")

// Prefix is an RFC 6052 IPv4-embedded IPv6 address prefix: the
// Well-Known Prefix or a Network-Specific Prefix of length 32, 40, 48,
// 56, 64 or 96 (RFC 6052 §2.2).
type Prefix struct {
	p   netip.Prefix
	wkp bool
}

// NewPrefix checks p against RFC 6052 §2.2: one of the allowed lengths,
// and bits 64 to 71 (the "u" octet) zero for a /96.
func NewPrefix(p netip.Prefix) (Prefix, error) {
	if !p.IsValid() || !p.Addr().Is6() || p.Addr().Is4In6() {
		return Prefix{}, fmt.Errorf("siit: %v is not an IPv6 prefix", p)
	}
	switch p.Bits() {
	case 32, 40, 48, 56, 64, 96:
	default:
		return Prefix{}, fmt.Errorf("siit: prefix %v: RFC 6052 allows the lengths 32, 40, 48, 56, 64 and 96", p)
	}
	p = p.Masked()
	if a := p.Addr().As16(); a[8] != 0 {
		return Prefix{}, fmt.Errorf("siit: prefix %v: bits 64 to 71 must be zero (RFC 6052 §2.2)", p)
	}
	return Prefix{p: p, wkp: p == WellKnownPrefix}, nil
}

// Prefix returns the IPv6 prefix.
func (p Prefix) Prefix() netip.Prefix { return p.p }

// IsValid reports whether p was made by NewPrefix.
func (p Prefix) IsValid() bool { return p.p.IsValid() }

// v4Bytes lists, for each prefix length, where the four bytes of the
// IPv4 address go (RFC 6052 §2.2, figure 1: byte 8 is skipped).
func v4Bytes(bits int) [4]int {
	switch bits {
	case 32:
		return [4]int{4, 5, 6, 7}
	case 40:
		return [4]int{5, 6, 7, 9}
	case 48:
		return [4]int{6, 7, 9, 10}
	case 56:
		return [4]int{7, 9, 10, 11}
	case 64:
		return [4]int{9, 10, 11, 12}
	}
	return [4]int{12, 13, 14, 15}
}

// Embed returns the IPv4-embedded IPv6 address of a (suffix zero). It
// refuses a non-global IPv4 address under the Well-Known Prefix (RFC
// 6052 §3.1).
func (p Prefix) Embed(a [4]byte) ([16]byte, bool) {
	if p.wkp && !Global4(a) {
		return [16]byte{}, false
	}
	return p.EmbedAny(a)
}

// EmbedAny is Embed without the Well-Known Prefix's restriction, for a
// DNS64 answering ipv4only.arpa (RFC 7050 §3), whose 192.0.0.170 and
// 192.0.0.171 are not global.
func (p Prefix) EmbedAny(a [4]byte) ([16]byte, bool) {
	if !p.p.IsValid() {
		return [16]byte{}, false
	}
	out := p.p.Addr().As16()
	for i, j := range v4Bytes(p.p.Bits()) {
		out[j] = a[i]
	}
	return out, true
}

// Extract returns the IPv4 address embedded in a, if a is under p
// (the suffix is ignored, RFC 6052 §2.2); like Embed it refuses a
// non-global IPv4 address under the Well-Known Prefix.
func (p Prefix) Extract(a [16]byte) ([4]byte, bool) {
	if !p.p.IsValid() || !p.p.Contains(netip.AddrFrom16(a)) {
		return [4]byte{}, false
	}
	var out [4]byte
	for i, j := range v4Bytes(p.p.Bits()) {
		out[i] = a[j]
	}
	if p.wkp && !Global4(out) {
		return [4]byte{}, false
	}
	return out, true
}

// Discover finds the prefix in a, an AAAA record of ipv4only.arpa that a
// DNS64 synthesised (RFC 7050 §3): the IPv4 address 192.0.0.170 or
// 192.0.0.171 embedded at the place one of the RFC 6052 lengths puts it,
// the shortest such prefix first. ok is false when a embeds neither.
func Discover(a netip.Addr) (Prefix, bool) {
	if !a.Is6() || a.Is4In6() {
		return Prefix{}, false
	}
	b := a.As16()
	for _, bits := range [...]int{32, 40, 48, 56, 64, 96} {
		var v [4]byte
		for i, j := range v4Bytes(bits) {
			v[i] = b[j]
		}
		if v != [4]byte{192, 0, 0, 170} && v != [4]byte{192, 0, 0, 171} {
			continue
		}
		if p, err := NewPrefix(netip.PrefixFrom(a, bits)); err == nil {
			return p, true
		}
	}
	return Prefix{}, false
}

// nonGlobal are the special-purpose IPv4 blocks of RFC 5735 §3 (and the
// shared address space of RFC 6598) that are not globally reachable.
var nonGlobal = [...]netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Global4 reports whether a is a global IPv4 address: none of the
// special-purpose blocks the Well-Known Prefix must not carry (RFC 6052
// §3.1, which points at RFC 5735 §3).
func Global4(a [4]byte) bool {
	addr := netip.AddrFrom4(a)
	for _, p := range nonGlobal {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

// Errors a translation fails with (wrapped, with the reason).
var (
	ErrDrop      = errors.New("siit: dropped as RFC 7915 says")
	ErrMalformed = errors.New("siit: malformed packet")
	ErrTTL       = errors.New("siit: hop limit exceeded")
	ErrAddress   = errors.New("siit: address not translatable")
	ErrShort     = errors.New("siit: output buffer too small")
)
