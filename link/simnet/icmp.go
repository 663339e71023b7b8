package simnet

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/mhi/sim"
)

// ICMPResponder is the smallest carrier network: it answers ICMP echo
// requests (IPv4 and ICMPv6) sent by the host on a data channel pair, from
// whatever address was pinged, and drops everything else. It is what the
// kernel cross-check pings through mhi_hwip0 and wwan0
// (docs/KERNEL-CROSSCHECK.md); on MBIM framing the reply goes back in an NTB16
// for the request's session.
//
// Its counters may be read at any time; Receive runs on the modem's device
// goroutine.
type ICMPResponder struct {
	// Framing of the channel pair it serves: raw IP (nil or
	// framing.RawIP{}) or MBIM NTB16 (mbim.NTB{}).
	Framing framing.Framing

	port atomic.Pointer[sim.Port]
	seq  uint16 // NTB16 wSequence of the replies
	pkt  []byte // reply being built, reused
	ntb  []byte // framed reply, reused
	// spans of the UL NTB being answered, reused.
	spans []framing.Span

	// Replies counts echo replies sent; Ignored counts well-formed
	// packets that are not echo requests (or not to a unicast address);
	// Malformed counts transfers or packets that do not parse or whose
	// checksums are wrong; Dropped counts replies the port refused.
	Replies, Ignored, Malformed, Dropped atomic.Uint64
}

// Start implements sim.Function.
func (r *ICMPResponder) Start(p *sim.Port) { r.port.Store(p) }

// Stop implements sim.Function.
func (r *ICMPResponder) Stop() { r.port.Store(nil) }

// Receive implements sim.Function: one UL transfer, a raw IP packet or an NTB.
func (r *ICMPResponder) Receive(td []byte) {
	if isRawIP(r.Framing) {
		r.answer(0, td)
		return
	}
	spans, err := mbim.DecodeNTB(td, r.spans[:0])
	r.spans = spans
	for _, s := range spans {
		r.answer(s.ID, td[s.Off:s.Off+s.Len])
	}
	if err != nil {
		r.Malformed.Add(1)
	}
}

// answer replies to one datagram if it is an echo request.
func (r *ICMPResponder) answer(session uint8, pkt []byte) {
	reply, verdict := echoReply(r.pkt[:0], pkt)
	switch verdict {
	case echoIgnored:
		r.Ignored.Add(1)
		return
	case echoMalformed:
		r.Malformed.Add(1)
		return
	}
	r.pkt = reply
	out := reply
	if !isRawIP(r.Framing) {
		r.ntb = mbim.AppendNTB(r.ntb[:0], r.seq, session, reply)
		r.seq++
		out = r.ntb
	}
	p := r.port.Load()
	if p == nil {
		r.Dropped.Add(1)
		return
	}
	// Counted before Send: once the reply is in host memory the host may
	// look at the counters, and a reply it holds must already be counted.
	r.Replies.Add(1)
	if p.Send(out) != nil {
		r.Replies.Add(^uint64(0))
		r.Dropped.Add(1)
	}
}

type echoVerdict uint8

const (
	echoReplied echoVerdict = iota
	echoIgnored
	echoMalformed
)

// IP and ICMP constants (RFC 791, RFC 792, RFC 8200, RFC 4443).
const (
	protoICMP      = 1
	protoICMPv6    = 58
	icmpEcho       = 8
	icmpEchoReply  = 0
	icmp6Echo      = 128
	icmp6EchoReply = 129
	replyTTL       = 64
)

// echoReply appends to dst the reply to an echo request pkt and reports
// echoReplied, or reports why there is none. The reply is the request with
// source and destination swapped, the type changed, a fresh TTL and both
// checksums recomputed; the identifier, sequence and data are kept, as a
// ping client checks them.
func echoReply(dst, pkt []byte) ([]byte, echoVerdict) {
	if len(pkt) < 1 {
		return dst, echoMalformed
	}
	switch pkt[0] >> 4 {
	case 4:
		return echoReply4(dst, pkt)
	case 6:
		return echoReply6(dst, pkt)
	}
	return dst, echoMalformed
}

func echoReply4(dst, pkt []byte) ([]byte, echoVerdict) {
	be := binary.BigEndian
	if len(pkt) < 20 {
		return dst, echoMalformed
	}
	ihl := int(pkt[0]&0x0f) * 4
	total := int(be.Uint16(pkt[2:]))
	if ihl < 20 || total < ihl || total > len(pkt) || checksum(pkt[:ihl], 0) != 0 {
		return dst, echoMalformed
	}
	pkt = pkt[:total] // link padding is not part of the packet
	if pkt[9] != protoICMP {
		return dst, echoIgnored
	}
	if be.Uint16(pkt[6:])&0x3fff != 0 {
		// A fragment (MF set or an offset): not reassembled here.
		return dst, echoIgnored
	}
	icmp := pkt[ihl:]
	if len(icmp) < 8 {
		return dst, echoMalformed
	}
	if checksum(icmp, 0) != 0 {
		return dst, echoMalformed
	}
	if icmp[0] != icmpEcho || icmp[1] != 0 {
		return dst, echoIgnored
	}
	if d := pkt[16]; d >= 224 || be.Uint32(pkt[16:]) == 0 {
		// Multicast, broadcast (240/4 and 255.255.255.255) or 0.0.0.0:
		// the reply would need a source address of our own.
		return dst, echoIgnored
	}
	start := len(dst)
	dst = append(dst, pkt...)
	out := dst[start:]
	copy(out[12:16], pkt[16:20])
	copy(out[16:20], pkt[12:16])
	out[8] = replyTTL
	be.PutUint16(out[10:], 0)
	be.PutUint16(out[10:], checksum(out[:ihl], 0))
	o := out[ihl:]
	o[0] = icmpEchoReply
	be.PutUint16(o[2:], 0)
	be.PutUint16(o[2:], checksum(o, 0))
	return dst, echoReplied
}

func echoReply6(dst, pkt []byte) ([]byte, echoVerdict) {
	be := binary.BigEndian
	const hdr = 40
	if len(pkt) < hdr {
		return dst, echoMalformed
	}
	plen := int(be.Uint16(pkt[4:]))
	if hdr+plen > len(pkt) {
		return dst, echoMalformed
	}
	pkt = pkt[:hdr+plen]
	if pkt[6] != protoICMPv6 {
		// Extension headers are not walked: only plain ICMPv6.
		return dst, echoIgnored
	}
	icmp := pkt[hdr:]
	if len(icmp) < 8 {
		return dst, echoMalformed
	}
	if checksum(icmp, pseudo6(pkt[8:24], pkt[24:40], len(icmp))) != 0 {
		return dst, echoMalformed
	}
	if icmp[0] != icmp6Echo || icmp[1] != 0 {
		return dst, echoIgnored
	}
	if pkt[24] == 0xff {
		// Multicast destination: the reply needs a unicast source.
		return dst, echoIgnored
	}
	start := len(dst)
	dst = append(dst, pkt...)
	out := dst[start:]
	copy(out[8:24], pkt[24:40])
	copy(out[24:40], pkt[8:24])
	out[7] = replyTTL
	o := out[hdr:]
	o[0] = icmp6EchoReply
	be.PutUint16(o[2:], 0)
	be.PutUint16(o[2:], checksum(o, pseudo6(out[8:24], out[24:40], len(o))))
	return dst, echoReplied
}

// pseudo6 is the unfolded sum of the IPv6 pseudo-header (RFC 8200 §8.1)
// for an ICMPv6 message of n bytes.
func pseudo6(src, dst []byte, n int) uint32 {
	var s uint32
	for i := 0; i < 16; i += 2 {
		s += uint32(src[i])<<8 | uint32(src[i+1])
		s += uint32(dst[i])<<8 | uint32(dst[i+1])
	}
	return s + uint32(n>>16) + uint32(n&0xffff) + protoICMPv6
}

// checksum is the Internet checksum (RFC 1071) of b added to the unfolded
// sum initial, folded: 0 over data that includes a correct checksum.
func checksum(b []byte, initial uint32) uint16 {
	s := uint64(initial)
	for len(b) >= 2 {
		s += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
