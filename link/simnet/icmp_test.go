package simnet

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/sim"
)

// inetSum is the test's own Internet checksum (RFC 1071), written as the
// RFC states it (one's complement sum of 16-bit words) rather than as the
// code under test does.
func inetSum(parts ...[]byte) uint16 {
	var all []byte
	for _, p := range parts {
		all = append(all, p...)
	}
	if len(all)%2 == 1 {
		all = append(all, 0)
	}
	var s uint32
	for i := 0; i < len(all); i += 2 {
		s += uint32(binary.BigEndian.Uint16(all[i:]))
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// ping4 builds an IPv4 ICMP echo request from src to dst.
func ping4(src, dst [4]byte, id, seq uint16, data []byte) []byte {
	icmp := append([]byte{icmpEcho, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq)}, data...)
	binary.BigEndian.PutUint16(icmp[2:], inetSum(icmp))
	ip := []byte{0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, protoICMP, 0, 0}
	ip = append(append(ip, src[:]...), dst[:]...)
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(icmp)))
	binary.BigEndian.PutUint16(ip[10:], inetSum(ip))
	return append(ip, icmp...)
}

// ping6 builds an ICMPv6 echo request.
func ping6(src, dst [16]byte, id, seq uint16, data []byte) []byte {
	icmp := append([]byte{icmp6Echo, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq)}, data...)
	ph := append(append(append([]byte{}, src[:]...), dst[:]...), 0, 0, byte(len(icmp)>>8), byte(len(icmp)), 0, 0, 0, protoICMPv6)
	binary.BigEndian.PutUint16(icmp[2:], inetSum(ph, icmp))
	ip := []byte{0x60, 0, 0, 0, byte(len(icmp) >> 8), byte(len(icmp)), protoICMPv6, 255}
	ip = append(append(ip, src[:]...), dst[:]...)
	return append(ip, icmp...)
}

var (
	hostIP  = [4]byte{192, 0, 2, 1}
	modemIP = [4]byte{192, 0, 2, 2}
	host6   = [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}
	modem6  = [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 2}
)

// checkReply4 checks that reply answers request: addresses swapped, type
// 0, id/seq/data kept, both checksums valid.
func checkReply4(t *testing.T, request, reply []byte) {
	t.Helper()
	if len(reply) != len(request) {
		t.Fatalf("reply of %d bytes for a %d-byte request", len(reply), len(request))
	}
	if inetSum(reply[:20]) != 0 {
		t.Error("bad IPv4 header checksum")
	}
	if inetSum(reply[20:]) != 0 {
		t.Error("bad ICMP checksum")
	}
	if !bytes.Equal(reply[12:16], request[16:20]) || !bytes.Equal(reply[16:20], request[12:16]) {
		t.Errorf("addresses %v → %v, want swapped", reply[12:16], reply[16:20])
	}
	if reply[20] != icmpEchoReply || reply[21] != 0 || reply[9] != protoICMP {
		t.Errorf("type %d code %d protocol %d", reply[20], reply[21], reply[9])
	}
	if !bytes.Equal(reply[24:], request[24:]) {
		t.Error("identifier, sequence or data changed")
	}
}

func TestEchoReplyIPv4(t *testing.T) {
	for _, size := range []int{0, 1, 56, 1472} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 13)
		}
		req := ping4(hostIP, modemIP, 0xbeef, uint16(size), data)
		reply, v := echoReply(nil, req)
		if v != echoReplied {
			t.Fatalf("%d data bytes: verdict %d", size, v)
		}
		checkReply4(t, req, reply)
		// Link padding after the packet is not echoed.
		padded, v := echoReply(nil, append(append([]byte{}, req...), 0, 0, 0))
		if v != echoReplied || !bytes.Equal(padded, reply) {
			t.Errorf("%d data bytes: padded request answered with %d bytes", size, len(padded))
		}
	}
}

func TestEchoReplyIPv6(t *testing.T) {
	req := ping6(host6, modem6, 7, 9, []byte("abcdefgh"))
	reply, v := echoReply(nil, req)
	if v != echoReplied {
		t.Fatalf("verdict %d", v)
	}
	if !bytes.Equal(reply[8:24], modem6[:]) || !bytes.Equal(reply[24:40], host6[:]) || reply[40] != icmp6EchoReply {
		t.Errorf("reply %x", reply)
	}
	ph := append(append(append([]byte{}, reply[8:24]...), reply[24:40]...), 0, 0, 0, byte(len(reply)-40), 0, 0, 0, protoICMPv6)
	if inetSum(ph, reply[40:]) != 0 {
		t.Error("bad ICMPv6 checksum")
	}
	if !bytes.Equal(reply[44:], req[44:]) {
		t.Error("identifier, sequence or data changed")
	}
}

func TestEchoReplyIgnoresWhatIsNotAnEchoRequest(t *testing.T) {
	req := ping4(hostIP, modemIP, 1, 1, []byte("x"))
	mod := func(f func(p []byte)) []byte {
		p := append([]byte{}, req...)
		f(p)
		return p
	}
	fixIP := func(p []byte) {
		binary.BigEndian.PutUint16(p[10:], 0)
		binary.BigEndian.PutUint16(p[10:], inetSum(p[:20]))
	}
	fixICMP := func(p []byte) {
		binary.BigEndian.PutUint16(p[22:], 0)
		binary.BigEndian.PutUint16(p[22:], inetSum(p[20:]))
	}
	for name, tc := range map[string]struct {
		pkt  []byte
		want echoVerdict
	}{
		"empty":              {nil, echoMalformed},
		"not IP":             {[]byte{0x21, 0, 0, 0}, echoMalformed},
		"truncated":          {req[:25], echoMalformed},
		"bad header sum":     {mod(func(p []byte) { p[10] ^= 1 }), echoMalformed},
		"bad ICMP sum":       {mod(func(p []byte) { p[28] ^= 1 }), echoMalformed},
		"echo reply":         {mod(func(p []byte) { p[20] = icmpEchoReply; fixICMP(p) }), echoIgnored},
		"UDP":                {mod(func(p []byte) { p[9] = 17; fixIP(p) }), echoIgnored},
		"fragment":           {mod(func(p []byte) { p[6] = 0x20; fixIP(p) }), echoIgnored},
		"broadcast":          {mod(func(p []byte) { copy(p[16:], []byte{255, 255, 255, 255}); fixIP(p) }), echoIgnored},
		"multicast":          {mod(func(p []byte) { p[16] = 224; fixIP(p) }), echoIgnored},
		"IPv6 multicast":     {ping6(host6, [16]byte{0: 0xff, 1: 2, 15: 1}, 1, 1, nil), echoIgnored},
		"IPv6 truncated":     {ping6(host6, modem6, 1, 1, nil)[:45], echoMalformed},
		"IPv6 extension hdr": {func() []byte { p := ping6(host6, modem6, 1, 1, nil); p[6] = 0; return p }(), echoIgnored},
	} {
		if r, v := echoReply(nil, tc.pkt); v != tc.want {
			t.Errorf("%s: verdict %d, want %d (reply %x)", name, v, tc.want, r)
		}
	}
}

// The emulated modem's minimal NTB16 codec was replaced by link/mbim's;
// these shims keep the tests written against it (and their fuzz corpus)
// checking the codec the responder now uses.
const (
	nth16Sig = mbim.NTH16Sig
	ndp16IPS = mbim.NDP16IPS
)

func appendNTB16(dst []byte, seq uint16, session uint8, dgram []byte) []byte {
	return mbim.AppendNTB(dst, seq, session, dgram)
}

func parseNTB16(b []byte, fn func(session uint8, dgram []byte)) error {
	spans, err := mbim.DecodeNTB(b, nil)
	for _, s := range spans {
		fn(s.ID, b[s.Off:s.Off+s.Len])
	}
	return err
}

func TestNTB16RoundTripAndKernelLayout(t *testing.T) {
	dg := ping4(hostIP, modemIP, 1, 2, []byte("hello"))
	ntb := appendNTB16(nil, 0x1234, 3, dg)
	le := binary.LittleEndian
	// mbim_tx_fixup's layout: NTH16, NDP16 at 12 with session 3, the
	// datagram at 0x1C.
	if le.Uint32(ntb) != nth16Sig || le.Uint16(ntb[4:]) != 12 || le.Uint16(ntb[6:]) != 0x1234 ||
		int(le.Uint16(ntb[8:])) != len(ntb) || le.Uint16(ntb[10:]) != 12 {
		t.Errorf("NTH16 %x", ntb[:12])
	}
	if !bytes.Equal(ntb[12:16], []byte{'I', 'P', 'S', 3}) || le.Uint16(ntb[16:]) != 16 || le.Uint16(ntb[20:]) != 0x1C ||
		int(le.Uint16(ntb[22:])) != len(dg) || le.Uint32(ntb[24:]) != 0 {
		t.Errorf("NDP16 %x", ntb[12:28])
	}
	var got [][]byte
	var sessions []uint8
	if err := parseNTB16(ntb, func(s uint8, d []byte) { sessions, got = append(sessions, s), append(got, d) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || sessions[0] != 3 || !bytes.Equal(got[0], dg) {
		t.Errorf("parsed %d datagrams, sessions %v", len(got), sessions)
	}
}

// ntb builds an NTB by hand: NDPs at the given offsets, each a list of
// {index, length} entries, chained in order.
func handNTB(size int, ndps map[int][][2]uint16, order []int, sigs map[int]uint32) []byte {
	le := binary.LittleEndian
	b := make([]byte, size)
	le.PutUint32(b, nth16Sig)
	le.PutUint16(b[4:], 12)
	le.PutUint16(b[8:], uint16(size))
	le.PutUint16(b[10:], uint16(order[0]))
	for i, at := range order {
		ents := ndps[at]
		sig := uint32(ndp16IPS)
		if s, ok := sigs[at]; ok {
			sig = s
		}
		le.PutUint32(b[at:], sig)
		le.PutUint16(b[at+4:], uint16(8+4*(len(ents)+1)))
		if i+1 < len(order) {
			le.PutUint16(b[at+6:], uint16(order[i+1]))
		}
		for j, e := range ents {
			le.PutUint16(b[at+8+4*j:], e[0])
			le.PutUint16(b[at+10+4*j:], e[1])
		}
	}
	return b
}

func TestNTB16ParsesSeveralNDPsAndDatagramsAndSkipsDSS(t *testing.T) {
	b := handNTB(256, map[int][][2]uint16{
		12: {{100, 10}, {120, 20}},
		40: {{150, 5}},
		60: {{200, 8}},
	}, []int{12, 40, 60}, map[int]uint32{40: 0x00535344 /* DSS */, 60: ndp16IPS | 7<<24})
	var n []int
	var sess []uint8
	if err := parseNTB16(b, func(s uint8, d []byte) { n, sess = append(n, len(d)), append(sess, s) }); err != nil {
		t.Fatal(err)
	}
	if len(n) != 3 || n[0] != 10 || n[1] != 20 || n[2] != 8 || sess[2] != 7 {
		t.Errorf("datagram lengths %v sessions %v", n, sess)
	}
}

func TestNTB16RejectsMalformedBlocks(t *testing.T) {
	le := binary.LittleEndian
	good := appendNTB16(nil, 0, 0, make([]byte, 40))
	mod := func(f func(b []byte)) []byte { b := append([]byte{}, good...); f(b); return b }
	loop := handNTB(64, map[int][][2]uint16{12: {{40, 4}}}, []int{12}, nil)
	le.PutUint16(loop[18:], 12) // the NDP's next index is itself
	for name, b := range map[string][]byte{
		"short":             good[:19],
		"signature":         mod(func(b []byte) { b[0] = 'X' }),
		"header length":     mod(func(b []byte) { b[4] = 16 }),
		"block too long":    mod(func(b []byte) { le.PutUint16(b[8:], uint16(len(b)+1)) }),
		"block inside NTH":  mod(func(b []byte) { le.PutUint16(b[8:], 1) }),
		"NDP inside NTH":    mod(func(b []byte) { le.PutUint16(b[10:], 4) }),
		"NDP past the end":  mod(func(b []byte) { le.PutUint16(b[10:], uint16(len(b)-4)) }),
		"NDP length small":  mod(func(b []byte) { le.PutUint16(b[16:], 8) }),
		"datagram past end": mod(func(b []byte) { le.PutUint16(b[22:], 200) }),
		"NDP loop":          loop,
	} {
		if err := parseNTB16(b, func(uint8, []byte) {}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// wBlockLength 0 is accepted (Linux has no lower bound, docs/FRAMING.md §3.2).
	if err := parseNTB16(mod(func(b []byte) { le.PutUint16(b[8:], 0) }), func(uint8, []byte) {}); err != nil {
		t.Errorf("wBlockLength 0: %v", err)
	}
}

func FuzzNTB16(f *testing.F) {
	f.Add(appendNTB16(nil, 1, 0, ping4(hostIP, modemIP, 1, 1, nil)))
	f.Add(handNTB(128, map[int][][2]uint16{12: {{60, 10}, {80, 4}}, 32: {{100, 20}}}, []int{12, 32}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = parseNTB16(b, func(_ uint8, d []byte) {
			if len(d) == 0 || len(d) > len(b) {
				t.Fatalf("datagram of %d bytes from a %d-byte NTB", len(d), len(b))
			}
			// Whatever the responder makes of it must not panic.
			_, _ = echoReply(nil, d)
		})
	})
}

// pingThrough sends request through mhistack's MHI host to a modem whose
// LOOPBACK pair runs r (qcom-qdu100: the pair has an event ring of its
// own, which the test polls), and returns what comes back on DL.
func pingThrough(t *testing.T, r *ICMPResponder, request []byte) []byte {
	t.Helper()
	rig := mhitest.New(t, mhitest.Options{ProfileName: "qcom-qdu100", Functions: map[string]sim.Function{"LOOPBACK": r}})
	dev, c := rig.Device, rig.Controller
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ul, dl, err := c.ChannelPair("LOOPBACK", mhi.ChannelOptions{}, mhi.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	er := dl.EventRing()
	if ul.EventRing() != er {
		t.Fatal("LOOPBACK UL and DL are not on one event ring")
	}
	kick := make(chan struct{}, 1)
	er.SetNotify(func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	for _, ch := range []*mhi.Channel{ul, dl} {
		if err := ch.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dma := dev.DMA()
	rx, err := dma.Alloc(4096, 64)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := dma.Alloc(len(request), 64)
	if err != nil {
		t.Fatal(err)
	}
	copy(tx.Mem, request)
	if err := dl.Queue(rx, rx.Len(), mhi.EOT); err != nil {
		t.Fatal(err)
	}
	dl.Ring()
	if err := ul.Queue(tx, len(request), mhi.EOT); err != nil {
		t.Fatal(err)
	}
	ul.Ring()
	var got []byte
	for got == nil {
		er.Poll(64, func(cp mhi.Completion) {
			if cp.Channel == dl {
				got = bytes.Clone(cp.Buf.Mem[:cp.Len])
			}
		})
		if got != nil {
			break
		}
		select {
		case <-kick:
		case <-ctx.Done():
			t.Fatal("no DL transfer came back")
		}
	}
	return got
}

func TestICMPResponderAnswersAPingOnRawIPChannel(t *testing.T) {
	r := &ICMPResponder{}
	req := ping4(hostIP, modemIP, 0x4242, 1, []byte("mhistack ping"))
	checkReply4(t, req, pingThrough(t, r, req))
	if r.Replies.Load() != 1 || r.Malformed.Load() != 0 {
		t.Errorf("replies %d malformed %d", r.Replies.Load(), r.Malformed.Load())
	}
}

func TestICMPResponderAnswersInNTB16OnMBIMFraming(t *testing.T) {
	r := &ICMPResponder{Framing: mbim.NTB{}}
	req := ping4(hostIP, modemIP, 0x4242, 1, []byte("mhistack ping"))
	// As mhi_wwan_mbim frames it: session 0.
	got := pingThrough(t, r, appendNTB16(nil, 0, 0, req))
	var replies [][]byte
	if err := parseNTB16(got, func(s uint8, d []byte) {
		if s != 0 {
			t.Errorf("reply on session %d", s)
		}
		replies = append(replies, d)
	}); err != nil {
		t.Fatalf("DL NTB: %v (%x)", err, got)
	}
	if len(replies) != 1 {
		t.Fatalf("%d datagrams in the DL NTB", len(replies))
	}
	checkReply4(t, req, replies[0])
}
