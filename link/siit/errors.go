package siit

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mhistack/mhistack/internal/csum"
)

// The ICMP errors a translator sends of its own for packets it cannot
// translate (RFC 7915 §4.1, §4.4, §5.1, §5.4): built here, sent (and
// rate-limited) by the caller.

var errNoICMP = fmt.Errorf("%w: no ICMP error is sent about this packet (RFC 792, RFC 1812 §4.3.2.7, RFC 4443 §2.4)", ErrDrop)

// Sizes of the ICMP errors made: an ICMPv4 error quotes at most what
// keeps it within 576 bytes (RFC 1812 §4.3.2.3), an ICMPv6 one within
// the IPv6 minimum MTU (RFC 4443 §2.4 c).
const (
	maxICMPv4Err = 576
	errTTL       = 64 // the hop limit of the errors made
)

// ErrorTo4 writes to dst the ICMPv4 error RFC 7915 §4 has a translator
// send back to the sender of the IPv4 packet p that To6 refused with
// err: Time Exceeded for ErrTTL (§4.1, as a router), Destination
// Unreachable, Source Route Failed for a source route option (§4.1). The
// error comes from the dummy address 192.0.0.8 (RFC 7600). Any other
// err, or a p no error may be sent about (an ICMP error, a fragment but
// the first, a multicast or broadcast address), fails with ErrDrop.
func ErrorTo4(dst, p []byte, err error) (int, error) {
	switch {
	case errors.Is(err, ErrTTL):
		return icmpError4(dst, p, icmp4TimeExceed, 0, 0)
	case errors.Is(err, errSourceRoute):
		return icmpError4(dst, p, icmp4Unreachable, 5, 0)
	}
	return 0, errNoICMP
}

// FragNeeded4 writes to dst the ICMPv4 Fragmentation Needed error (type
// 3 code 4, RFC 1191 §4) for the IPv4 packet p with DF set that is too
// big for an IPv6 link of MTU mtu6 once translated: the next-hop MTU it
// gives is mtu6 less 20, the difference between the headers (RFC 7915
// §4 and §6, "MTU"). Refusals as ErrorTo4.
func FragNeeded4(dst, p []byte, mtu6 int) (int, error) {
	return icmpError4(dst, p, icmp4Unreachable, 4, uint32(min(max(mtu6-(ipv6Len-ipv4Min), 68), 0xffff)))
}

// ErrorTo6 writes to dst the ICMPv6 error RFC 7915 §5 has a translator
// send back to the sender of the IPv6 packet p that To4 refused with
// err, from src: Time Exceeded for ErrTTL (§5.1, as a router),
// Parameter Problem code 0 pointing at the Segments Left field of a
// routing header with segments left (§5.1). Any other err, or a p no
// error may be sent about (an ICMPv6 error, a non-first fragment, a
// multicast destination), fails with ErrDrop.
func ErrorTo6(dst, p []byte, src [16]byte, err error) (int, error) {
	switch {
	case errors.Is(err, ErrTTL):
		return icmpError6(dst, p, src, icmp6TimeExceed, 0, 0)
	case errors.Is(err, errRouting):
		ptr, ok := segmentsLeftAt(p)
		if !ok {
			return 0, errNoICMP
		}
		return icmpError6(dst, p, src, icmp6ParamProb, 0, uint32(ptr))
	}
	return 0, errNoICMP
}

// segmentsLeftAt finds the offset in p of the Segments Left field of
// its first routing header with segments left.
func segmentsLeftAt(p []byte) (int, bool) {
	if len(p) < ipv6Len {
		return 0, false
	}
	nh, at := p[6], ipv6Len
	for range maxExtHdrs {
		if at+8 > len(p) {
			return 0, false
		}
		switch nh {
		case nhHopByHop, nhDestOpts, nhRouting:
			if nh == nhRouting && p[at+3] != 0 {
				return at + 3, true
			}
			nh, at = p[at], at+(int(p[at+1])+1)*8
		case nhFragment:
			nh, at = p[at], at+fragHdrLen
		default:
			return 0, false
		}
	}
	return 0, false
}

// isError4 reports whether the IPv4 packet p (header length ihl) is an
// ICMPv4 error, which gets no error back (RFC 792, RFC 1812 §4.3.2.7).
func isError4(p []byte, ihl int) bool {
	if p[9] != protoICMP || len(p) <= ihl {
		return false
	}
	switch p[ihl] {
	case icmp4Unreachable, 4, 5, icmp4TimeExceed, icmp4ParamProb:
		return true
	}
	return false
}

// icmpError4 builds an ICMPv4 error of type typ and code about p, with
// rest as its second word, from 192.0.0.8 to p's source.
func icmpError4(dst, p []byte, typ, code byte, rest uint32) (int, error) {
	if len(p) < ipv4Min || p[0]>>4 != 4 {
		return 0, errV4Header
	}
	ihl := int(p[0]&0xf) * 4
	if ihl < ipv4Min || ihl > len(p) {
		return 0, errV4Header
	}
	if total := int(binary.BigEndian.Uint16(p[2:])); total >= ihl && total < len(p) {
		p = p[:total]
	}
	src, to := p[12:16], p[16:20]
	if binary.BigEndian.Uint16(p[6:])&0x1fff != 0 || isError4(p, ihl) ||
		src[0] >= 224 || src[0] == 0 || src[0] == 127 || to[0] >= 224 {
		return 0, errNoICMP
	}
	q := min(len(p), maxICMPv4Err-ipv4Min-icmpHdrLen)
	n := ipv4Min + icmpHdrLen + q
	if len(dst) < n {
		return 0, ErrShort
	}
	h := dst[:ipv4Min]
	h[0], h[1] = 4<<4|5, 0
	binary.BigEndian.PutUint16(h[2:], uint16(n))
	binary.BigEndian.PutUint32(h[4:], 0)
	h[8], h[9] = errTTL, protoICMP
	h[10], h[11] = 0, 0
	copy(h[12:16], dummy4[:])
	copy(h[16:20], src)
	binary.BigEndian.PutUint16(h[10:], ^csum.Checksum(h, 0))
	m := dst[ipv4Min:n]
	m[0], m[1], m[2], m[3] = typ, code, 0, 0
	binary.BigEndian.PutUint32(m[4:], rest)
	copy(m[icmpHdrLen:], p[:q])
	binary.BigEndian.PutUint16(m[2:], ^csum.Checksum(m, 0))
	return n, nil
}

// icmpError6 builds an ICMPv6 error of type typ and code about p, with
// rest as its second word, from src to p's source.
func icmpError6(dst, p []byte, src [16]byte, typ, code byte, rest uint32) (int, error) {
	if len(p) < ipv6Len || p[0]>>4 != 6 {
		return 0, errV6Header
	}
	if plen := int(binary.BigEndian.Uint16(p[4:])); plen > 0 && ipv6Len+plen < len(p) {
		p = p[:ipv6Len+plen]
	}
	to := p[8:24]
	if to[0] == 0xff || p[24] == 0xff || [16]byte(to) == ([16]byte{}) || isError6(p) {
		return 0, errNoICMP
	}
	q := min(len(p), maxICMPv6Err-ipv6Len-icmpHdrLen)
	n := ipv6Len + icmpHdrLen + q
	if len(dst) < n {
		return 0, ErrShort
	}
	h := dst[:ipv6Len]
	binary.BigEndian.PutUint32(h[0:], 6<<28)
	binary.BigEndian.PutUint16(h[4:], uint16(icmpHdrLen+q))
	h[6], h[7] = protoICMPv6, errTTL
	copy(h[8:24], src[:])
	copy(h[24:40], to)
	m := dst[ipv6Len:n]
	m[0], m[1], m[2], m[3] = typ, code, 0, 0
	binary.BigEndian.PutUint32(m[4:], rest)
	copy(m[icmpHdrLen:], p[:q])
	s := pseudo(src[:], to, uint32(len(m)), protoICMPv6)
	binary.BigEndian.PutUint16(m[2:], ^csum.Checksum(m, fold(s)))
	return n, nil
}

// isError6 reports whether the IPv6 packet p is an ICMPv6 error or a
// fragment other than the first, neither of which gets an error back
// (RFC 4443 §2.4 e).
func isError6(p []byte) bool {
	nh, at := p[6], ipv6Len
	for range maxExtHdrs {
		if at+2 > len(p) {
			return false
		}
		switch nh {
		case nhHopByHop, nhDestOpts, nhRouting:
			nh, at = p[at], at+(int(p[at+1])+1)*8
		case nhFragment:
			if at+4 > len(p) || binary.BigEndian.Uint16(p[at+2:])&^7 != 0 {
				return true
			}
			nh, at = p[at], at+fragHdrLen
		case protoICMPv6:
			return p[at] < icmp6Echo
		default:
			return false
		}
	}
	return true // too many extension headers to tell: stay quiet
}
