package siit

import (
	"encoding/binary"
	"fmt"
)

// LowestIPv6MTU is RFC 7915 §4's "lowest-ipv6-mtu" default: the size
// an IPv4 packet with DF clear is cut to once translated, since no IPv6
// router on the way will fragment it (RFC 8200 §5).
const LowestIPv6MTU = 1280

var errFragment = fmt.Errorf("%w: cannot fragment within the MTU", ErrDrop)

// FragmentLimit reports how long the IPv6 packets translated from the
// IPv4 packet p may be on a link of MTU mtu, and whether p lets a
// translator cut it into IPv6 fragments to fit (RFC 7915 §4): with DF
// clear it may, to at most LowestIPv6MTU bytes each; a fragment already
// (whose sender set DF on it all the same) may be cut further to fit
// mtu; a whole packet with DF set may not, and is too big if its
// translation is over mtu. id is the Identification the fragments take
// in the low 16 bits of theirs (RFC 7915 §4.1).
func FragmentLimit(p []byte, mtu int) (limit int, id uint32, ok bool) {
	if len(p) < ipv4Min {
		return mtu, 0, false
	}
	ff := binary.BigEndian.Uint16(p[6:])
	id = uint32(binary.BigEndian.Uint16(p[4:]))
	switch {
	case ff&0x4000 == 0:
		return min(mtu, LowestIPv6MTU), id, true
	case ff&0x3fff != 0:
		return mtu, id, true
	}
	return mtu, 0, false
}

// NextFragment writes to dst the IPv6 fragment of p that starts at byte
// at of p's fragmentable part, at most mtu bytes long, and returns its
// length and where the next one starts (0 after the last). p is what To6
// made of an IPv4 packet: a Fragment header right after the IPv6 header
// (an IPv4 fragment: its offset, M flag and Identification are kept,
// the pieces' offsets counted from it), or none (id is then the
// Identification, from MayFragment). Each piece's data but the last's is
// a multiple of 8 bytes (RFC 8200 §4.5). Calling with at = 0, then with
// each next until it is 0, cuts all of p; a p that cannot be cut is
// refused at the first call.
func NextFragment(dst, p []byte, id uint32, at, mtu int) (n, next int, err error) {
	const hl = ipv6Len + fragHdrLen
	if len(p) < ipv6Len || p[0]>>4 != 6 || mtu < hl+8 {
		return 0, 0, errFragment
	}
	nh, data, base, more := p[6], p[ipv6Len:], 0, false
	if nh == nhFragment {
		if len(p) < hl {
			return 0, 0, errFragment
		}
		v := binary.BigEndian.Uint16(p[ipv6Len+2:])
		nh, data, base, more = p[ipv6Len], p[hl:], int(v&^7), v&1 != 0
		id = binary.BigEndian.Uint32(p[ipv6Len+4:])
	}
	// The last piece starts at most at the last multiple of 8 in data:
	// refused at once, not part-way, if its offset would not fit.
	if at < 0 || at >= len(data) || at%8 != 0 || base+(len(data)-1)&^7 > 0xfff8 {
		return 0, 0, errFragment
	}
	k := (mtu - hl) &^ 7
	if at+k >= len(data) {
		k, next = len(data)-at, 0
	} else {
		next, more = at+k, true
	}
	if len(dst) < hl+k {
		return 0, 0, ErrShort
	}
	copy(dst[:ipv6Len], p[:ipv6Len])
	binary.BigEndian.PutUint16(dst[4:], uint16(fragHdrLen+k))
	dst[6] = nhFragment
	f := dst[ipv6Len:hl]
	f[0], f[1] = nh, 0
	m := uint16(0)
	if more {
		m = 1
	}
	binary.BigEndian.PutUint16(f[2:], uint16(base+at)|m)
	binary.BigEndian.PutUint32(f[4:], id)
	copy(dst[hl:], data[at:at+k])
	return hl + k, next, nil
}
