package simnet

import (
	"github.com/mhistack/mhistack/link/radio"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// The radio model (CarrierOptions.Radio) sits on the network's side of
// the modem, where a cell's air interface and its queues are:
//
//	UL: Receive → receivePacket → radio (Up) → radioUp → ingest (NAT64) → rxLoop → gVisor
//	DL: gVisor → WritePackets → writeRadio (NAT64) → radio (Down) → radioDown → Port.Send / DL aggregation
//
// The model copies each packet in and hands it back on its own
// goroutine per direction, so neither the device goroutine nor gVisor's
// writers wait for the radio. Echo replies, which the network answers
// itself, cross the DL like any packet, so a ping measures the model's
// round trip. The session (MBIM session ID, QMAP mux ID) travels as the
// model's tag. Without a model none of this runs.

func (cn *CarrierNetwork) startRadio(cfg radio.Config) error {
	l, err := radio.New(cfg, cn.ep.radioDown, cn.radioUp)
	if err != nil {
		return err
	}
	cn.radio = l
	return nil
}

// radioUp is the model's UL delivery: the packet reaches the network.
func (cn *CarrierNetwork) radioUp(session uint32, pkt []byte) {
	if cn.ep.disp.Load() == nil {
		return
	}
	proto := header.IPv4ProtocolNumber
	if header.IPVersion(pkt) == header.IPv6Version {
		proto = header.IPv6ProtocolNumber
	}
	cn.ingest(uint8(session), proto, pkt)
}

// writeRadio cuts pkts into IP packets (as writeOut does) and gives them
// to the model's DL; radioDown sends them on.
func (l *carrierLink) writeRadio(pkts stack.PacketBufferList) (int, tcpip.Error) {
	w := l.writer()
	defer l.put(w)
	seg := &w.seg
	framed := !isRawIP(l.cn.opts.Framing)
	for _, pkt := range pkts.AsSlice() {
		var session uint8
		if framed {
			session = l.cn.sessionFor(pkt.NetworkHeader().Slice())
		}
		if !seg.Reset(pkt) {
			l.cn.stats.dropped.Add(1)
			continue
		}
		for !seg.Done() {
			size := seg.Next()
			if size > len(w.buf) {
				w.buf = make([]byte, max(size, 2048))
			}
			b := w.buf[:size]
			seg.Write(b)
			if l.cn.nat64 == nil {
				if err := l.cn.radio.Send(radio.Down, uint32(session), b); err != nil {
					return 0, &tcpip.ErrClosedForSend{}
				}
				continue
			}
			// The NAT64 is the network's: it translates before the radio.
			b, extra := w.translate(l.cn.nat64, b, l.mtu)
			for _, b := range [2][]byte{b, extra} {
				if b == nil {
					continue
				}
				if framed {
					session = l.cn.sessionFor(b)
				}
				if err := l.cn.radio.Send(radio.Down, uint32(session), b); err != nil {
					return 0, &tcpip.ErrClosedForSend{}
				}
			}
		}
	}
	return pkts.Len(), nil
}

// radioDown is the model's DL delivery: the packet goes to the host, on
// raw IP in a transfer of its own, on a framed pair into the DL
// aggregation. It runs on the model's DL goroutine only.
func (l *carrierLink) radioDown(session uint32, pkt []byte) {
	if isRawIP(l.cn.opts.Framing) {
		p := l.port.Load()
		if p == nil || l.send(p, pkt) != nil {
			l.cn.stats.dropped.Add(1)
			return
		}
		l.cn.stats.dl.Add(1)
		return
	}
	a := &l.agg
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	l.radioPiece.b = pkt
	l.addFramed(&l.radioPiece, uint8(session))
	l.radioPiece.b = nil
}

// bytesPiece is one whole packet for addFramed.
type bytesPiece struct{ b []byte }

func (p *bytesPiece) Next() int        { return len(p.b) }
func (p *bytesPiece) Write(dst []byte) { copy(dst, p.b) }
func (p *bytesPiece) Skip()            {}
