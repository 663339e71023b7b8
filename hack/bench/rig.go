package main

import (
	"fmt"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/linktest"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/sim"
)

// profile is the emulated modem every table runs on: IP_HW0 has 128-slot
// rings, a 32768-byte MRU and 1 ms BEI interrupt moderation.
const profile = "qcom-sdx55m"

// rig is one emulated modem in mission mode with a link endpoint on its
// IP_HW0 pair (link/linktest's rig, strict: a bench run that made the
// modem see a host protocol violation, or a DMA fault, is reported as
// failed, not as a number). Each run of each table builds its own, so
// that runs are independent samples.
type rig struct {
	lr *linktest.Rig
	ep *link.Endpoint
	m  *sim.Modem
}

func newRig(fn sim.Function, so sim.Options, lo link.Options) (*rig, error) {
	lr, err := linktest.Start(linktest.Options{Options: mhitest.Options{ProfileName: profile, Sim: so}, Link: lo, Function: fn})
	if err != nil {
		return nil, err
	}
	return &rig{lr: lr, ep: lr.Endpoint, m: lr.Modem}, nil
}

// close tears the rig down (a gVisor stack may have closed the endpoint
// already: Stack.Destroy does, and closing it again is harmless). The
// error joins the Close errors and the violations and faults the rig
// recorded.
func (r *rig) close() error { return r.lr.Close() }

// counter is a NetworkDispatcher that only counts: the RX tables measure
// the link and the MHI host, not a transport stack.
type counter struct{ pkts, bytes atomic.Uint64 }

func (c *counter) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	c.pkts.Add(1)
	c.bytes.Add(uint64(pkt.Size()))
}

func (c *counter) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// udp4 builds an IPv4/UDP packet of exactly size bytes (size ≥ 28) with
// valid checksums, so that the endpoint's RX checksum validation runs as
// it would on real traffic. seq varies the ports and the payload.
func udp4(seq, size int) []byte {
	b := make([]byte, size)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(size),
		ID:          uint16(seq),
		TTL:         64,
		Protocol:    uint8(header.UDPProtocolNumber),
		SrcAddr:     tcpip.AddrFrom4([4]byte{10, 0, 0, 1}),
		DstAddr:     tcpip.AddrFrom4([4]byte{10, 0, 0, 2}),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(b[header.IPv4MinimumSize:])
	for i := header.UDPMinimumSize; i < len(u); i++ {
		u[i] = byte(seq*31 + i)
	}
	u.Encode(&header.UDPFields{SrcPort: 5353, DstPort: uint16(1000 + seq%1000), Length: uint16(len(u))})
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(u)))
	xsum = checksum.Checksum(u[header.UDPMinimumSize:], xsum)
	u.SetChecksum(^u.CalculateChecksum(xsum))
	return b
}

// mapCsumValid is csum_valid in byte 1 of the MAPv5 checksum header
// (docs/FRAMING.md §4.1): the modem validated the packet's TCP/UDP
// checksum and found it good.
const mapCsumValid = 0x80

// udpFrames returns nFrames distinct DL frames of perFrame UDP packets of
// size bytes each: raw IP when perFrame is 1, else aggregates built by
// link/qmap's aggregator (the emulated modem's DL aggregator) in the
// MAP version of f. With csumValid every MAPv5 packet carries
// csum_valid, as a modem with DL checksum offload sends it.
func udpFrames(nFrames, perFrame, size int, f qmap.Framing, csumValid bool) ([][]byte, error) {
	frames := make([][]byte, nFrames)
	buf := make([]byte, framing.MaxFrame)
	var spans []framing.Span
	for fi := range frames {
		if perFrame == 1 {
			frames[fi] = udp4(fi, size)
			continue
		}
		f.MaxDatagrams = perFrame
		a := qmap.NewAggregator(f)
		a.Begin(buf)
		for i := range perFrame {
			dst := a.Add(size)
			if dst == nil {
				return nil, fmt.Errorf("%d packets of %d bytes do not fit one %s frame", perFrame, size, f.Name())
			}
			copy(dst, udp4(fi*perFrame+i, size))
		}
		frame := append([]byte(nil), buf[:a.End()]...)
		if csumValid && f.Version == 5 {
			var err error
			if spans, err = qmap.Decode(frame, 5, spans[:0]); err != nil {
				return nil, err
			}
			for _, sp := range spans {
				frame[sp.Off-qmap.V5HeaderLen+1] |= mapCsumValid
			}
		}
		frames[fi] = frame
	}
	return frames, nil
}
