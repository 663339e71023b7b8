package siit

import (
	"testing"

	"github.com/mhistack/mhistack/internal/csum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Fuzz targets: whatever arrives, the translator never panics, and what
// it returns parses as a packet of the other family whose checksums are
// right if the input's were.

func FuzzTo6(f *testing.F) {
	f.Add(ipv4(host4, remote4, protoTCP, 64, 0, 0, tcpSeg(host4, remote4, "x")))
	f.Add(ipv4(host4, remote4, protoUDP, 64, 0, 0, udpDgram(host4, remote4, "x", false)))
	f.Add(ipv4(host4, remote4, protoICMP, 64, 0, 0, icmp4(icmp4Echo, 0, 1, []byte("x"))))
	f.Add(ipv4(remote4, host4, protoICMP, 64, 0, 0, icmp4(icmp4Unreachable, 4, 1400,
		ipv4(host4, remote4, protoUDP, 64, 0, 0, udpDgram(host4, remote4, "x", true)))))
	f.Add(ipv4(host4, remote4, protoUDP, 64, header.IPv4FlagMoreFragments, 0, udpDgram(host4, remote4, "xxxxxxxx", true)))
	f.Add(withSourceRoute(ipv4(host4, remote4, protoUDP, 64, 0, 0, udpDgram(host4, remote4, "x", true))))
	f.Add(ipv4(host4, remote4, protoUDP, 64, 0, 0, udpDgram(host4, remote4, string(make([]byte, 1400)), true)))
	tr := newTranslator(f, nsp)
	out, second, e := make([]byte, 70000), make([]byte, 70000), make([]byte, 600)
	f.Fuzz(func(t *testing.T, p []byte) {
		n, err := tr.To6(out, p)
		if err != nil {
			// What the translator refuses is answered, if at all, with
			// a valid ICMPv4 error of at most 576 bytes.
			if m, err := ErrorTo4(e, p, err); err == nil {
				checkError4(t, p, e[:m])
			}
			return
		}
		if m, err := FragNeeded4(e, p, 1280); err == nil {
			checkError4(t, p, e[:m])
		}
		// A packet that may be cut cuts into valid fragments within the limit
		// that hold all of it.
		if limit, id, ok := FragmentLimit(p, 1500); ok {
			q, data := out[:n], 0
			for at, i := 0, 0; ; i++ {
				m, next, err := NextFragment(second, q, id, at, limit)
				if err != nil {
					if i > 0 {
						t.Fatalf("piece %d of %x at %d refused after the first was made: %v", i, q, at, err)
					}
					break
				}
				if m > limit || !header.IPv6(second[:m]).IsValid(m) || i > 60 || (next != 0 && next <= at) {
					t.Fatalf("piece %d of %x at %d: %d bytes, next %d", i, q, at, m, next)
				}
				data += m - 48
				if next == 0 {
					hl := 40
					if q[6] == nhFragment {
						hl = 48
					}
					if data != n-hl {
						t.Fatalf("pieces of %x hold %d bytes, want %d", q, data, n-hl)
					}
					break
				}
				at = next
			}
		}
		q := out[:n]
		h := header.IPv6(q)
		if !h.IsValid(n) || int(h.PayloadLength())+40 != n {
			t.Fatalf("To6 made an invalid IPv6 packet %x", q)
		}
		if csum.PacketOK(p, header.IPv4ProtocolNumber) && !csum.PacketOK(q, header.IPv6ProtocolNumber) {
			t.Fatalf("valid %x became %x with a wrong checksum", p, q)
		}
		if h.NextHeader() == protoICMPv6 && !icmp6OK(q) {
			t.Fatalf("ICMPv6 checksum wrong in %x", q)
		}
		// A fragment 8 bytes over an MTU splits into two within it.
		if mtu := n - 8; h.NextHeader() == nhFragment && mtu >= 56 {
			n1, n2, err := SplitFragment(second, q, mtu)
			if err == nil && (n1 > mtu || n2 > mtu || !header.IPv6(q[:n1]).IsValid(n1) || !header.IPv6(second[:n2]).IsValid(n2)) {
				t.Fatalf("split of %x at %d: %d and %d bytes", q, mtu, n1, n2)
			}
		}
	})
}

func FuzzTo4(f *testing.F) {
	r6 := embed(f, nsp, remote4)
	f.Add(ipv6(r6, host6, protoTCP, 64, tcpSeg(r6, host6, "x")))
	f.Add(ipv6(r6, host6, protoICMPv6, 64, icmp6(r6, host6, icmp6EchoReply, 0, 1, []byte("x"))))
	f.Add(ipv6(r6, host6, protoICMPv6, 64, icmp6(r6, host6, icmp6TooBig, 0, 1280,
		ipv6(host6, r6, protoUDP, 64, udpDgram(host6, r6, "x", true)))))
	f.Add(ipv6(r6, host6, nhFragment, 64, append([]byte{protoUDP, 0, 0, 1, 0, 0, 0, 9}, udpDgram(r6, host6, "xxxxxxxx", true)...)))
	f.Add(ipv6(r6, host6, nhRouting, 64, append([]byte{protoUDP, 0, 0, 1, 0, 0, 0, 0}, udpDgram(r6, host6, "x", true)...)))
	tr := newTranslator(f, nsp)
	out, e := make([]byte, 70000), make([]byte, 1400)
	f.Fuzz(func(t *testing.T, p []byte) {
		n, err := tr.To4(out, p)
		if err != nil {
			// What the translator refuses is answered, if at all, with
			// a valid ICMPv6 error within 1280 bytes.
			if m, err := ErrorTo6(e, p, host6.As16(), err); err == nil {
				q := e[:m]
				if m > 1280 || !header.IPv6(q).IsValid(m) || !icmp6OK(q) || q[40] >= 128 {
					t.Fatalf("error %x about %x", q, p)
				}
			}
			return
		}
		q := out[:n]
		h := header.IPv4(q)
		if !h.IsValid(n) || int(h.TotalLength()) != n || !h.IsChecksumValid() {
			t.Fatalf("To4 made an invalid IPv4 packet %x", q)
		}
		plain := len(p) > 6 && (p[6] == protoTCP || p[6] == protoUDP)
		if plain && csum.PacketOK(p, header.IPv6ProtocolNumber) && !csum.PacketOK(q, header.IPv4ProtocolNumber) {
			t.Fatalf("valid %x became %x with a wrong checksum", p, q)
		}
		if h.Protocol() == protoICMP && !h.More() && h.FragmentOffset() == 0 && !icmp4OK(q) {
			t.Fatalf("ICMPv4 checksum wrong in %x", q)
		}
	})
}

// checkError4 fails unless q is a valid ICMPv4 error about p.
func checkError4(t *testing.T, p, q []byte) {
	t.Helper()
	h := header.IPv4(q)
	if len(q) > 576 || !h.IsValid(len(q)) || !h.IsChecksumValid() || !icmp4OK(q) || q[20] == icmp4Echo || q[20] == icmp4EchoReply {
		t.Fatalf("error %x about %x", q, p)
	}
}
