package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// profile is the emulated modem every table runs on: IP_HW0 has 128-slot
// rings, a 32768-byte MRU and 1 ms BEI interrupt moderation.
const profile = "qcom-sdx55m"

// rig is one emulated modem in mission mode with a link endpoint on its
// IP_HW0 pair. Each run of each table builds its own, so that runs are
// independent samples.
type rig struct {
	dev *vpci.Device
	m   *sim.Modem
	c   *mhi.Controller
	ep  *link.Endpoint
	// violations counts host protocol violations the strict modem saw; a
	// bench run with any is reported as failed, not as a number.
	violations atomic.Int64
}

func newRig(fn sim.Function, so sim.Options, lo link.Options) (*rig, error) {
	p, ok := mhi.Lookup(profile)
	if !ok {
		return nil, fmt.Errorf("no profile %s", profile)
	}
	r := &rig{}
	so.Strict = true
	so.OnViolation = func(error) { r.violations.Add(1) }
	so.Functions = map[string]sim.Function{link.DefaultChannel: fn}
	dev, m, err := sim.NewDevice(p, so)
	if err != nil {
		return nil, err
	}
	r.dev, r.m = dev, m
	c, err := mhi.New(dev, mhi.Options{Profile: p, Timeout: 3 * time.Second})
	if err != nil {
		dev.Close()
		return nil, err
	}
	r.c = c
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.PowerUp(ctx); err != nil {
		c.Close()
		dev.Close()
		return nil, fmt.Errorf("PowerUp: %w", err)
	}
	ep, err := link.New(ctx, c, lo)
	if err != nil {
		c.Close()
		dev.Close()
		return nil, fmt.Errorf("link.New: %w", err)
	}
	r.ep = ep
	return r, nil
}

// close tears the rig down; epClosed says a gVisor stack already closed
// the endpoint (Stack.Destroy does).
func (r *rig) close(epClosed bool) error {
	if !epClosed {
		r.ep.Close()
		r.ep.Wait()
	}
	err := r.c.Close()
	if e := r.dev.Close(); err == nil {
		err = e
	}
	if n := r.violations.Load(); n > 0 && err == nil {
		err = fmt.Errorf("%d host protocol violations", n)
	}
	return err
}

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

// qmapLike is a minimal QMAP-style aggregation framing for the MRU table:
// each IP packet is preceded by a 4-byte MAP header (pad/flags, mux ID,
// big-endian payload length), as in rmnet's QMAPv1. It stands in for
// link/qmap (issue 6), which had not landed when this table was written;
// the cost per packet it adds to the host is the same order (one header
// parse per packet).
type qmapLike struct{}

const qmapHeader = 4

func (qmapLike) Name() string  { return "qmap-like" }
func (qmapLike) Overhead() int { return qmapHeader }

func (qmapLike) Decode(frame []byte, spans []link.Span) ([]link.Span, error) {
	for off := 0; off < len(frame); {
		if len(frame)-off < qmapHeader {
			return spans, link.ErrRunt
		}
		n := int(binary.BigEndian.Uint16(frame[off+2:]))
		off += qmapHeader
		if n == 0 || n > len(frame)-off {
			return spans, link.ErrBadFrame
		}
		spans = append(spans, link.Span{Off: off, Len: n})
		off += n
	}
	return spans, nil
}

func (qmapLike) NewEncoder() link.Encoder { return &qmapEncoder{} }

type qmapEncoder struct {
	buf []byte
	off int
}

func (e *qmapEncoder) Begin(buf []byte) { e.buf, e.off = buf, 0 }

func (e *qmapEncoder) Add(n int) []byte {
	if n <= 0 || n > 0xffff || n > len(e.buf)-e.off-qmapHeader {
		return nil
	}
	h := e.buf[e.off:]
	h[0], h[1] = 0, 1
	binary.BigEndian.PutUint16(h[2:], uint16(n))
	dst := e.buf[e.off+qmapHeader : e.off+qmapHeader+n]
	e.off += qmapHeader + n
	return dst
}

func (e *qmapEncoder) End() int { n := e.off; e.buf, e.off = nil, 0; return n }

// aggregate builds one qmapLike frame of pkts.
func aggregate(pkts [][]byte) []byte {
	var f []byte
	for _, p := range pkts {
		f = append(f, 0, 1)
		f = binary.BigEndian.AppendUint16(f, uint16(len(p)))
		f = append(f, p...)
	}
	return f
}

// udpFrames returns nFrames distinct DL frames of perFrame UDP packets of
// size bytes each: raw IP when perFrame is 1, else qmapLike aggregates.
func udpFrames(nFrames, perFrame, size int) [][]byte {
	frames := make([][]byte, nFrames)
	for f := range frames {
		pkts := make([][]byte, perFrame)
		for i := range pkts {
			pkts[i] = udp4(f*perFrame+i, size)
		}
		if perFrame == 1 {
			frames[f] = pkts[0]
		} else {
			frames[f] = aggregate(pkts)
		}
	}
	return frames
}
