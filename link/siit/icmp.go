package siit

import (
	"encoding/binary"

	"github.com/mhistack/mhistack/internal/csum"
)

// ICMP types (RFC 792, RFC 4443 §2.1).
const (
	icmp4EchoReply   = 0
	icmp4Unreachable = 3
	icmp4Echo        = 8
	icmp4TimeExceed  = 11
	icmp4ParamProb   = 12

	icmp6Unreachable = 1
	icmp6TooBig      = 2
	icmp6TimeExceed  = 3
	icmp6ParamProb   = 4
	icmp6Echo        = 128
	icmp6EchoReply   = 129

	icmpHdrLen = 8
)

// plateaus are the MTUs of RFC 1191 §7, for a Fragmentation Needed
// message that gives no MTU (RFC 7915 §4.2).
var plateaus = [...]int{32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68}

// icmp4to6 translates the ICMPv4 message m (declared bytes long; less
// may be present inside an error) into an ICMPv6 message in dst, from
// src6 to dst6 (RFC 7915 §4.2; §4.3 for the packet inside an error).
func (t *Translator) icmp4to6(dst, m []byte, src6, dst6 *[16]byte, declared int, inner bool) (int, error) {
	if len(m) < icmpHdrLen && !(inner && len(m) >= 4) {
		return 0, errTransport
	}
	if !inner && ^csum.Checksum(m, 0) != 0 {
		return 0, errICMPSum
	}
	typ, code := m[0], m[1]
	switch typ {
	case icmp4Echo, icmp4EchoReply:
		if len(dst) < len(m) {
			return 0, ErrShort
		}
		t6 := byte(icmp6Echo)
		if typ == icmp4EchoReply {
			t6 = icmp6EchoReply
		}
		copy(dst, m)
		dst[0] = t6
		// Only the type changes, and ICMPv6 adds a pseudo-header: an
		// incremental update is right even for a message cut short.
		old := binary.BigEndian.Uint16(m[2:])
		c := adjust(old, uint32(typ)<<8|uint32(code), uint32(t6)<<8|uint32(code)+
			pseudo(src6[:], dst6[:], uint32(declared), protoICMPv6))
		binary.BigEndian.PutUint16(dst[2:], c)
		return len(m), nil
	case icmp4Unreachable, icmp4TimeExceed, icmp4ParamProb:
	default:
		return 0, errICMPType
	}
	if inner {
		return 0, errNested
	}
	if len(dst) < icmpHdrLen {
		return 0, ErrShort
	}
	h := dst[:icmpHdrLen]
	clear(h)
	switch typ {
	case icmp4Unreachable:
		h[0] = icmp6Unreachable
		switch code {
		case 0, 1, 5, 6, 7, 8, 11, 12: // net, host, source route, unknown, isolated, TOS
			h[1] = 0 // no route
		case 9, 10, 13, 15: // administratively prohibited, precedence cutoff
			h[1] = 1
		case 2: // protocol unreachable: Parameter Problem at Next Header
			h[0], h[1] = icmp6ParamProb, 1
			binary.BigEndian.PutUint32(h[4:], 6)
		case 3: // port unreachable
			h[1] = 4
		case 4: // fragmentation needed: Packet Too Big
			h[0] = icmp6TooBig
			mtu := int(binary.BigEndian.Uint16(m[6:]))
			if mtu == 0 {
				mtu = plateau(m[icmpHdrLen:])
			}
			binary.BigEndian.PutUint32(h[4:], uint32(mtu+ipv6Len-ipv4Min))
		default: // 14 (host precedence violation) and unassigned codes
			return 0, errICMPType
		}
	case icmp4TimeExceed:
		h[0], h[1] = icmp6TimeExceed, code
	case icmp4ParamProb:
		if code != 0 && code != 2 {
			return 0, errICMPType
		}
		ptr, ok := pointer4to6(m[4])
		if !ok {
			return 0, errICMPType
		}
		h[0] = icmp6ParamProb
		binary.BigEndian.PutUint32(h[4:], ptr)
	}
	n, err := t.to6(dst[icmpHdrLen:], m[icmpHdrLen:], true)
	if err != nil {
		return 0, err
	}
	n += icmpHdrLen
	n = min(n, maxICMPv6Err-ipv6Len)
	s := pseudo(src6[:], dst6[:], uint32(n), protoICMPv6)
	binary.BigEndian.PutUint16(dst[2:], ^csum.Checksum(dst[:n], fold(s)))
	return n, nil
}

// plateau estimates the MTU from the IPv4 packet in an error (RFC 1191 §7).
func plateau(p []byte) int {
	if len(p) < 4 {
		return plateaus[len(plateaus)-1]
	}
	l := int(binary.BigEndian.Uint16(p[2:]))
	for _, m := range plateaus {
		if m < l {
			return m
		}
	}
	return plateaus[len(plateaus)-1]
}

// pointer4to6 maps an IPv4 Parameter Problem pointer to the IPv6 one
// (RFC 7915 §4.2, figure 3).
func pointer4to6(p byte) (uint32, bool) {
	switch {
	case p == 0, p == 1:
		return uint32(p), true
	case p == 2, p == 3:
		return 4, true
	case p == 8:
		return 7, true
	case p == 9:
		return 6, true
	case p >= 12 && p <= 15:
		return 8, true
	case p >= 16 && p <= 19:
		return 24, true
	}
	return 0, false
}

// pointer6to4 maps an IPv6 Parameter Problem pointer to the IPv4 one
// (RFC 7915 §5.2, figure 6).
func pointer6to4(p uint32) (byte, bool) {
	switch {
	case p == 0, p == 1:
		return byte(p), true
	case p == 4, p == 5:
		return 2, true
	case p == 6:
		return 9, true
	case p == 7:
		return 8, true
	case p >= 8 && p <= 23:
		return 12, true
	case p >= 24 && p <= 39:
		return 16, true
	}
	return 0, false
}

// icmp6to4 translates the ICMPv6 message m into an ICMPv4 message in
// dst (RFC 7915 §5.2; §5.3 for the packet inside an error).
func (t *Translator) icmp6to4(dst, m []byte, src6, dst6 *[16]byte, declared int, inner bool) (int, error) {
	if len(m) < icmpHdrLen && !(inner && len(m) >= 4) {
		return 0, errTransport
	}
	if !inner && ^csum.Checksum(m, fold(pseudo(src6[:], dst6[:], uint32(len(m)), protoICMPv6))) != 0 {
		return 0, errICMPSum
	}
	typ, code := m[0], m[1]
	switch typ {
	case icmp6Echo, icmp6EchoReply:
		if len(dst) < len(m) {
			return 0, ErrShort
		}
		t4 := byte(icmp4Echo)
		if typ == icmp6EchoReply {
			t4 = icmp4EchoReply
		}
		copy(dst, m)
		dst[0] = t4
		old := binary.BigEndian.Uint16(m[2:])
		c := adjust(old, uint32(typ)<<8|uint32(code)+pseudo(src6[:], dst6[:], uint32(declared), protoICMPv6),
			uint32(t4)<<8|uint32(code))
		binary.BigEndian.PutUint16(dst[2:], c)
		return len(m), nil
	case icmp6Unreachable, icmp6TooBig, icmp6TimeExceed, icmp6ParamProb:
	default: // informational messages other than echo, ND, MLD
		return 0, errICMPType
	}
	if inner {
		return 0, errNested
	}
	if len(dst) < icmpHdrLen {
		return 0, ErrShort
	}
	h := dst[:icmpHdrLen]
	clear(h)
	switch typ {
	case icmp6Unreachable:
		h[0] = icmp4Unreachable
		switch code {
		case 0, 2, 3: // no route, beyond scope, address unreachable
			h[1] = 1
		case 1: // administratively prohibited
			h[1] = 10
		case 4: // port unreachable
			h[1] = 3
		default:
			return 0, errICMPType
		}
	case icmp6TooBig:
		h[0], h[1] = icmp4Unreachable, 4
		mtu := binary.BigEndian.Uint32(m[4:])
		if mtu < ipv6Len {
			return 0, errICMPType
		}
		mtu = min(mtu-(ipv6Len-ipv4Min), 0xffff)
		binary.BigEndian.PutUint16(h[6:], uint16(mtu))
	case icmp6TimeExceed:
		h[0], h[1] = icmp4TimeExceed, code
	case icmp6ParamProb:
		switch code {
		case 0:
			ptr, ok := pointer6to4(binary.BigEndian.Uint32(m[4:]))
			if !ok {
				return 0, errICMPType
			}
			h[0] = icmp4ParamProb
			h[4] = ptr
		case 1: // unrecognised Next Header: protocol unreachable
			h[0], h[1] = icmp4Unreachable, 2
		default:
			return 0, errICMPType
		}
	}
	n, err := t.to4(dst[icmpHdrLen:], m[icmpHdrLen:], true)
	if err != nil {
		return 0, err
	}
	n += icmpHdrLen
	binary.BigEndian.PutUint16(dst[2:], ^csum.Checksum(dst[:n], 0))
	return n, nil
}
