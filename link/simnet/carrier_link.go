package simnet

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/internal/segment"
	"github.com/mhistack/mhistack/link/siit"
	"github.com/mhistack/mhistack/mhi/sim"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// carrierLink is the carrier stack's NIC: packets it writes go to the
// host on the DL channel; packets from the host come in through Receive.
type carrierLink struct {
	cn   *CarrierNetwork
	mtu  uint32
	port atomic.Pointer[sim.Port]
	disp atomic.Pointer[stack.NetworkDispatcher]
	pool sync.Pool // *dlWriter: Port.Send copies, so one per writer at a time
	agg  dlAgg     // DL aggregation on a framed pair
	// radioPiece carries a packet the radio model delivers into
	// addFramed (radioDown, on the model's DL goroutine only).
	radioPiece bytesPiece
}

func (l *carrierLink) MTU() uint32                      { return l.mtu }
func (l *carrierLink) SetMTU(mtu uint32)                { l.mtu = mtu }
func (l *carrierLink) MaxHeaderLength() uint16          { return 0 }
func (l *carrierLink) LinkAddress() tcpip.LinkAddress   { return "" }
func (l *carrierLink) SetLinkAddress(tcpip.LinkAddress) {}
func (l *carrierLink) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload // rxLoop validates: ulChecksumOK
}
func (l *carrierLink) IsAttached() bool                        { return l.disp.Load() != nil }
func (l *carrierLink) Wait()                                   {}
func (l *carrierLink) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (l *carrierLink) AddHeader(*stack.PacketBuffer)           {}
func (l *carrierLink) ParseHeader(*stack.PacketBuffer) bool    { return true }
func (l *carrierLink) Close()                                  {}
func (l *carrierLink) SetOnCloseAction(func())                 {}

// GSOMaxSize and SupportedGSO: the carrier's NIC does TSO, as a network
// server's NIC does: host GSO, so the carrier's TCP hands the link
// segments of up to 64 KiB, cut into MSS-sized packets (internal/segment,
// the same cutting the host's link does for UL) while they are copied into
// the DL transfer or frame. gVisor builds, routes and checksums one packet
// per 64 KiB instead of one per MSS.
func (l *carrierLink) GSOMaxSize() uint32               { return 1 << 16 }
func (l *carrierLink) SupportedGSO() stack.SupportedGSO { return stack.HostGSOSupported }

// dlWriter is what one WritePackets call works with.
type dlWriter struct {
	seg   segment.Segmenter
	buf   []byte // one DL packet (raw IP), grown on demand
	xl    []byte // buf translated by the NAT64, grown on demand
	piece bytesPiece
}

// translate gives the NAT64 the DL packet b (w.buf): the IPv6 packet it
// made of it (in w.xl) and, for a fragment that outgrew mtu, a second
// fragment (in w.buf); b itself if it is not the NAT64's; nil if the
// NAT64 refused it.
func (w *dlWriter) translate(nat *nat64, b []byte, mtu uint32) (first, second []byte) {
	if nat == nil || !owns(b) {
		return b, nil
	}
	if len(w.xl) < len(b)+dlGrowth {
		w.xl = make([]byte, max(len(b)+dlGrowth, 2048))
	}
	m, _ := nat.dl(w.xl, b)
	if m == 0 {
		return nil, nil
	}
	n, m2, err := siit.SplitFragment(w.buf, w.xl[:m], int(mtu))
	if err != nil {
		nat.refused.Add(1)
		return nil, nil
	}
	return w.xl[:n], w.buf[:m2]
}

func (l *carrierLink) writer() *dlWriter {
	w, _ := l.pool.Get().(*dlWriter)
	if w == nil {
		w = new(dlWriter)
	}
	return w
}

// put returns w to the pool without the packet it last walked.
func (l *carrierLink) put(w *dlWriter) {
	w.seg.Release()
	l.pool.Put(w)
}

func (l *carrierLink) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		l.disp.Store(nil)
		return
	}
	l.disp.Store(&d)
}

func (l *carrierLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	pkts, dead := l.cn.dlLive(pkts)
	if dead > 0 {
		n, err := l.WritePackets(pkts)
		return n + dead, err
	}
	if t := l.cn.tlp; t != nil {
		for _, pkt := range pkts.AsSlice() {
			t.record(pkt)
		}
	}
	return l.writeOut(pkts)
}

// writeOut sends pkts to the host: WritePackets without the tail loss
// probe's bookkeeping, which the probes themselves take.
func (l *carrierLink) writeOut(pkts stack.PacketBufferList) (int, tcpip.Error) {
	p := l.port.Load()
	if p == nil {
		// The data pair is stopped: the packets are lost, as on a
		// modem whose data channels are down.
		l.cn.stats.dropped.Add(uint64(pkts.Len()))
		return 0, &tcpip.ErrClosedForSend{}
	}
	if l.cn.radio != nil {
		return l.writeRadio(pkts)
	}
	if !isRawIP(l.cn.opts.Framing) {
		return l.writeFramed(pkts)
	}
	w := l.writer()
	defer l.put(w)
	seg := &w.seg
	n := 0
	for _, pkt := range pkts.AsSlice() {
		if !seg.Reset(pkt) {
			l.cn.stats.dropped.Add(1)
			n++
			continue
		}
		for !seg.Done() {
			size := seg.Next()
			if size > len(w.buf) {
				w.buf = make([]byte, max(size, 2048))
			}
			b := w.buf[:size]
			seg.Write(b)
			b, extra := w.translate(l.cn.nat64, b, l.mtu)
			if b == nil {
				continue
			}
			if extra != nil {
				if err := l.send(p, b); err == nil {
					l.cn.stats.dl.Add(1)
				} else {
					l.cn.stats.dropped.Add(1)
				}
				b = extra
			}
			if err := l.send(p, b); err != nil {
				l.cn.stats.dropped.Add(1)
				if n == 0 {
					return 0, &tcpip.ErrNoBufferSpace{}
				}
				return n, nil
			}
			l.cn.stats.dl.Add(1)
		}
		n++
	}
	return n, nil
}

// sendPatience bounds how long a writer of the carrier waits for DL room.
const sendPatience = time.Second

// send is Port.Send with a network's patience: Send waits up to the
// modem's SendTimeout for queue room, a network queues longer before it
// drops, so the writer (a gVisor goroutine or the DL sender, never the
// device goroutine) tries again until sendPatience has passed.
func (l *carrierLink) send(p *sim.Port, b []byte) error {
	deadline := time.Now().Add(sendPatience)
	for {
		err := p.Send(b)
		if !errors.Is(err, sim.ErrNoBuffer) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-l.cn.quit:
			return err
		default:
		}
	}
}
