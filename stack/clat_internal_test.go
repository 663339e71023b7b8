//go:build !race

// The race detector makes sync.Pool drop what is put back, so pooled
// buffers allocate under it: this test runs without it.

package stack

import (
	"net/netip"
	"testing"

	"github.com/mhistack/mhistack/link/siit"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TestCLATTranslatesWithoutAllocatingPerPacket: what the CLAT adds to a
// packet's way out (copy, translation, the IPv6 packet buffer, from
// pools) allocates nothing per packet once warm.
func TestCLATTranslatesWithoutAllocatingPerPacket(t *testing.T) {
	ep := channel.New(16, 1500, "")
	a6 := netip.MustParseAddr("2001:db8:6::2")
	s, err := New(ep, Config{Addresses: []netip.Prefix{netip.PrefixFrom(a6, 64)}, TXQueueLen: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pfx, _ := siit.NewPrefix(netip.MustParsePrefix("2001:db8:46::/64"))
	s.mu.Lock()
	err = s.startCLATLocked(newCLATState(pfx, clatAddr6(a6)))
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	src, dst := tcpip.AddrFrom4(CLATAddr4.As4()), tcpip.AddrFrom4([4]byte{198, 18, 0, 1})
	raw := make([]byte, 20+8+100)
	ip := header.IPv4(raw)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(raw)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber), SrcAddr: src, DstAddr: dst})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(raw[20:])
	u.Encode(&header.UDPFields{SrcPort: 1, DstPort: 2, Length: 108})
	u.SetChecksum(^checksum.Checksum(u, header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, 108)))

	var list gstack.PacketBufferList
	send := func(translate bool) {
		pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(raw)})
		list.PushBack(pkt)
		if translate {
			s.clatLink.WritePackets(list)
			if p := ep.Read(); p != nil {
				p.DecRef()
			} else {
				t.Fatal("nothing reached the link")
			}
		}
		list.Reset()
	}
	for range 10 {
		send(true)
	}
	base := testing.AllocsPerRun(200, func() { send(false) })
	with := testing.AllocsPerRun(200, func() { send(true) })
	if with > base {
		t.Fatalf("%.1f allocations per packet through the CLAT beyond the %.1f of making it", with-base, base)
	}
	if st := s.Stats(); st.CLATTranslated < 210 || st.CLATRefused != 0 {
		t.Fatalf("translated %d, refused %d", st.CLATTranslated, st.CLATRefused)
	}
}
