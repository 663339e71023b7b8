package stack

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/siit"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

var clatTestPrefix = netip.MustParsePrefix("2001:db8:46::/64")

// clatOnChannel is a stack on a channel endpoint of MTU mtu with its
// CLAT running on clatTestPrefix.
func clatOnChannel(t *testing.T, mtu uint32) (*Stack, *channel.Endpoint) {
	t.Helper()
	ep := channel.New(64, mtu, "")
	a6 := netip.MustParseAddr("2001:db8:6::2")
	s, err := New(ep, Config{Addresses: []netip.Prefix{netip.PrefixFrom(a6, 64)}, TXQueueLen: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	pfx, _ := siit.NewPrefix(clatTestPrefix)
	s.mu.Lock()
	err = s.startCLATLocked(newCLATState(pfx, clatAddr6(a6)))
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return s, ep
}

// udp4 is an IPv4 UDP datagram from the CLAT's address to 198.18.0.1
// with size bytes of data, flags, and options (a multiple of 4 bytes).
func udp4(size int, flags uint8, opts []byte) []byte {
	src, dst := tcpip.AddrFrom4(CLATAddr4.As4()), tcpip.AddrFrom4([4]byte{198, 18, 0, 1})
	hl := 20 + len(opts)
	raw := make([]byte, hl+8+size)
	ip := header.IPv4(raw)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(raw)), ID: 0x4242, Flags: flags, TTL: 64,
		Protocol: uint8(header.UDPProtocolNumber), SrcAddr: src, DstAddr: dst, Options: header.IPv4OptionsSerializer{}})
	raw[0] = 4<<4 | byte(hl/4)
	copy(raw[20:hl], opts)
	ip.SetChecksum(0)
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(raw[hl:])
	u.Encode(&header.UDPFields{SrcPort: 1, DstPort: 2, Length: uint16(8 + size)})
	u.SetChecksum(^checksum.Checksum(u, header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(8+size))))
	return raw
}

// write4 hands the CLAT's NIC the IPv4 packet raw, as the stack does.
func write4(s *Stack, raw []byte) {
	var list gstack.PacketBufferList
	pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(raw)})
	list.PushBack(pkt)
	s.clatLink.WritePackets(list)
	pkt.DecRef()
}

// sent returns the packets the stack wrote to ep.
func sent(ep *channel.Endpoint) [][]byte {
	var out [][]byte
	for p := ep.Read(); p != nil; p = ep.Read() {
		out = append(out, p.ToView().AsSlice())
		p.DecRef()
	}
	return out
}

// TestCLATFragmentsADFClearPacketOver1280Bytes: an IPv4 datagram with
// DF clear that is more than 1280 bytes as IPv6 goes as IPv6 fragments
// of at most 1280 bytes (RFC 7915 §4), on a link whose MTU would take it
// whole; with DF set it goes whole.
func TestCLATFragmentsADFClearPacketOver1280Bytes(t *testing.T) {
	s, ep := clatOnChannel(t, 1500)
	write4(s, udp4(1400, 0, nil))
	pkts := sent(ep)
	if len(pkts) != 2 {
		t.Fatalf("%d packets on the link, want 2 fragments", len(pkts))
	}
	data := 0
	for i, p := range pkts {
		h := header.IPv6(p)
		if len(p) > 1280 || !h.IsValid(len(p)) || h.NextHeader() != uint8(header.IPv6FragmentHeader) {
			t.Fatalf("piece %d: %d bytes, next header %d", i, len(p), h.NextHeader())
		}
		f := header.IPv6Fragment(p[40:])
		if f.ID() != 0x4242 || f.More() != (i == 0) || int(f.FragmentOffset())*8 != data {
			t.Fatalf("piece %d: id %#x more %v offset %d", i, f.ID(), f.More(), f.FragmentOffset())
		}
		data += len(p) - 48
	}
	if data != 1408 {
		t.Fatalf("the fragments hold %d bytes, want 1408", data)
	}
	write4(s, udp4(1400, header.IPv4FlagDontFragment, nil))
	if pkts := sent(ep); len(pkts) != 1 || len(pkts[0]) != 1448 {
		t.Fatalf("a DF datagram went as %d packets", len(pkts))
	}
}

// waitStat waits until get reports at least want.
func waitStat(t *testing.T, what string, get func() uint64, want uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for get() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want %d", what, get(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCLATAnswersWhatItRefusesWithICMPv4: a DF packet too big for the
// link once translated is answered with Fragmentation Needed, a source
// route option with Source Route Failed; both reach the stack's ICMP.
func TestCLATAnswersWhatItRefusesWithICMPv4(t *testing.T) {
	s, ep := clatOnChannel(t, 1300)
	rcvd := s.gs.Stats().ICMP.V4.PacketsReceived.DstUnreachable
	write4(s, udp4(1300, header.IPv4FlagDontFragment, nil))
	lsrr := []byte{131, 7, 4, 198, 51, 100, 1, 0}
	write4(s, udp4(10, 0, lsrr))
	if pkts := sent(ep); len(pkts) != 0 {
		t.Fatalf("%d packets reached the link", len(pkts))
	}
	waitStat(t, "ICMPv4 Destination Unreachable received", rcvd.Value, 2)
	if st := s.Stats(); st.CLATErrorsSent != 2 || st.CLATRefused != 2 {
		t.Fatalf("CLAT ICMP errors %d, refused %d; want 2, 2", st.CLATErrorsSent, st.CLATRefused)
	}
}

// TestCLATAnswersARoutingHeaderWithParameterProblem: an IPv6 packet for
// the CLAT with a routing header with segments left is answered, on the
// link, with ICMPv6 Parameter Problem pointing at Segments Left (RFC
// 7915 §5.1); the errors are rate-limited.
func TestCLATAnswersARoutingHeaderWithParameterProblem(t *testing.T) {
	s, ep := clatOnChannel(t, 1500)
	c := s.tap.clat.Load()
	pfx, _ := siit.NewPrefix(clatTestPrefix)
	from, _ := pfx.Embed([4]byte{198, 18, 0, 1})
	src, dst := tcpip.AddrFrom16(from), tcpip.AddrFrom16(c.addr6)
	body := make([]byte, 8+8+4)
	copy(body, []byte{uint8(header.UDPProtocolNumber), 0, 0, 1, 0, 0, 0, 0})
	u := header.UDP(body[8:])
	u.Encode(&header.UDPFields{SrcPort: 2, DstPort: 1, Length: 12})
	u.SetChecksum(^checksum.Checksum(u, header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, 12)))
	raw := make([]byte, 40+len(body))
	header.IPv6(raw).Encode(&header.IPv6Fields{PayloadLength: uint16(len(body)), TransportProtocol: tcpip.TransportProtocolNumber(header.IPv6RoutingExtHdrIdentifier),
		HopLimit: 64, SrcAddr: src, DstAddr: dst})
	copy(raw[40:], body)
	inject := func() {
		ep.InjectInbound(header.IPv6ProtocolNumber, gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(raw)}))
	}
	inject()
	p := ep.Read()
	if p == nil {
		t.Fatal("no ICMPv6 error on the link")
	}
	b := p.ToView().AsSlice()
	p.DecRef()
	h := header.IPv6(b)
	if h.NextHeader() != uint8(header.ICMPv6ProtocolNumber) || h.DestinationAddress() != src || h.SourceAddress() != dst ||
		b[40] != 4 || b[41] != 0 || binary.BigEndian.Uint32(b[44:]) != 43 {
		t.Fatalf("sent %x, want Parameter Problem code 0 pointer 43 from the CLAT to the sender", b)
	}
	start := time.Now()
	for range 100 {
		inject()
	}
	elapsed := time.Since(start)
	got := len(sent(ep))
	// The bucket holds clatErrorBurst and refills at clatErrorRate a
	// second: the first answer took one token.
	if most := clatErrorBurst - 1 + int(elapsed.Seconds()*clatErrorRate) + 1; got > most || got < clatErrorBurst-1 {
		t.Fatalf("%d errors for 100 packets in %v, want %d to %d", got, elapsed, clatErrorBurst-1, most)
	}
	if st := s.Stats(); st.CLATErrorsSent != uint64(got+1) || st.CLATRefused != 101 {
		t.Fatalf("CLAT ICMP errors %d (sent %d), refused %d", st.CLATErrorsSent, got+1, st.CLATRefused)
	}
}

// TestCLATFragNeededReachesASendingSocket: a datagram the stack sends
// with DF through the CLAT that does not fit the link once translated
// (the CLAT's MTU left above the link's less 20) is answered with
// Fragmentation Needed, which reaches the stack's ICMP from a real send
// (the error goes on a goroutine of its own: a TCP endpoint's handling
// of it takes the lock its send holds).
func TestCLATFragNeededReachesASendingSocket(t *testing.T) {
	s, ep := clatOnChannel(t, 1300)
	if err := s.gs.SetNICMTU(clatNIC, 1480); err != nil {
		t.Fatal(err)
	}
	rcvd := s.gs.Stats().ICMP.V4.PacketsReceived.DstUnreachable
	c, err := s.DialUDP(t.Context(), netip.AddrPort{}, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, 1}), 9))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 1400))
		done <- err
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the send did not return within 30 s")
	}
	waitStat(t, "ICMPv4 Destination Unreachable received", rcvd.Value, 1)
	sent(ep)
}
