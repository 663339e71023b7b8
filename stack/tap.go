package stack

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// tap sits between the gVisor NIC and the link endpoint: it copies
// packets to a pcap writer while a capture runs and can hide the link's
// GSO support. With no capture it costs one atomic load per packet (or
// per GRO batch on RX).
type tap struct {
	nested.Endpoint
	noGSO bool
	pcap  atomic.Pointer[pcapWriter]
}

func newTap(lower gstack.LinkEndpoint, noGSO bool) *tap {
	t := &tap{noGSO: noGSO}
	t.Endpoint.Init(lower, t)
	return t
}

// SupportedGSO implements stack.GSOEndpoint.
func (t *tap) SupportedGSO() gstack.SupportedGSO {
	if t.noGSO {
		return gstack.GSONotSupported
	}
	return t.Endpoint.SupportedGSO()
}

// DeliverNetworkPacket implements stack.NetworkDispatcher (RX from the
// link).
func (t *tap) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *gstack.PacketBuffer) {
	if w := t.pcap.Load(); w != nil {
		w.write(pkt)
	}
	t.Endpoint.DeliverNetworkPacket(proto, pkt)
}

// WritePackets implements stack.LinkWriter (TX to the link).
func (t *tap) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	if w := t.pcap.Load(); w != nil {
		for _, p := range pkts.AsSlice() {
			w.write(p)
		}
	}
	return t.Endpoint.WritePackets(pkts)
}

// pcapWriter writes a pcap stream of raw IP packets (LINKTYPE_RAW).
type pcapWriter struct {
	mu      sync.Mutex
	w       io.Writer
	snapLen uint32
	err     error
	hdr     [16]byte
}

// linkTypeRaw is LINKTYPE_RAW (101): packets start with the IP header.
const linkTypeRaw = 101

func (p *pcapWriter) write(pkt *gstack.PacketBuffer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	n := uint32(pkt.Size())
	caplen := min(n, p.snapLen)
	now := time.Now()
	binary.LittleEndian.PutUint32(p.hdr[0:], uint32(now.Unix()))
	binary.LittleEndian.PutUint32(p.hdr[4:], uint32(now.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(p.hdr[8:], caplen)
	binary.LittleEndian.PutUint32(p.hdr[12:], n)
	if _, p.err = p.w.Write(p.hdr[:]); p.err != nil {
		return
	}
	left := caplen
	for _, s := range pkt.AsSlices() {
		if left == 0 {
			break
		}
		s = s[:min(uint32(len(s)), left)]
		left -= uint32(len(s))
		if _, p.err = p.w.Write(s); p.err != nil {
			return
		}
	}
}

// ErrCaptureRunning is returned by CapturePcap while another capture
// runs.
var ErrCaptureRunning = errors.New("stack: a capture is already running")

// CapturePcap writes every packet crossing the link (both directions, as
// the stack sees them: GSO batches before segmentation on TX, GRO merges
// on RX) to w in pcap format (LINKTYPE_RAW), each cut to snapLen bytes
// (0: 65535), until stop is called. Writes to w happen on the stack's
// goroutines: a slow w slows the stack down. After a write error the
// capture stops writing. stop returns that error, if any.
func (s *Stack) CapturePcap(w io.Writer, snapLen uint32) (stop func() error, err error) {
	if snapLen == 0 {
		snapLen = 65535
	}
	p := &pcapWriter{w: w, snapLen: snapLen}
	var fh [24]byte
	binary.LittleEndian.PutUint32(fh[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(fh[4:], 2)
	binary.LittleEndian.PutUint16(fh[6:], 4)
	binary.LittleEndian.PutUint32(fh[16:], snapLen)
	binary.LittleEndian.PutUint32(fh[20:], linkTypeRaw)
	if !s.tap.pcap.CompareAndSwap(nil, p) {
		return nil, ErrCaptureRunning
	}
	p.mu.Lock()
	_, p.err = w.Write(fh[:])
	p.mu.Unlock()
	return func() error {
		s.tap.pcap.CompareAndSwap(p, nil)
		p.mu.Lock()
		defer p.mu.Unlock()
		err := p.err
		p.err = errors.New("stopped")
		return err
	}, nil
}
