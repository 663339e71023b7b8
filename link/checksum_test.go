package link

import (
	"github.com/mhistack/mhistack/link/framing"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// FuzzChecksumOK feeds device-written bytes to the RX validation: it must
// never panic or read outside the packet, whatever the length fields say.
func FuzzChecksumOK(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2, 0, 8, 0, 0})
	f.Add(append([]byte{0x60, 0, 0, 0, 0, 20, 6, 64}, make([]byte, 52)...))
	f.Add([]byte{0x45, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		switch header.IPVersion(p) {
		case header.IPv4Version:
			if len(p) >= header.IPv4MinimumSize {
				checksumOK(p, header.IPv4ProtocolNumber)
			}
		case header.IPv6Version:
			if len(p) >= header.IPv6MinimumSize {
				checksumOK(p, header.IPv6ProtocolNumber)
			}
		}
	})
}

// FuzzRawIPDecode: one span covering the frame, or ErrRunt.
func FuzzRawIPDecode(f *testing.F) {
	f.Add([]byte{0x45})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		spans, err := framing.RawIP{}.Decode(frame, nil)
		if len(frame) == 0 {
			if err == nil || len(spans) != 0 {
				t.Fatalf("empty frame: %v, %v", spans, err)
			}
			return
		}
		if err != nil || len(spans) != 1 || spans[0] != (framing.Span{Off: 0, Len: len(frame)}) {
			t.Fatalf("Decode(%d bytes) = %v, %v", len(frame), spans, err)
		}
	})
}
