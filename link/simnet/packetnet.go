package simnet

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/sim"
)

// PacketNet is a carrier network for framing tests: it parses UL
// transfers strictly in its Framing (a malformed one is a host
// violation), hands each IP packet to OnPacket, optionally echoes it, and
// sends DL packets given to Send framed and aggregated like a modem. QMAP
// commands from the host are counted (ACKs) and it can send flow-control
// commands (SendCommand).
type PacketNet struct {
	// Framing of the pair (raw IP: nil or framing.RawIP{}; mbim.NTB{};
	// qmap.Framing{Version: 1 or 5}); MaxDatagrams and MaxBytes bound DL
	// aggregation (defaults 32 / 32 KiB) and replace the value's own.
	// The value's own limits are what the modem accepts on UL: a UL
	// frame beyond them is malformed (see parseUL).
	Framing                framing.Framing
	MaxDatagrams, MaxBytes int
	// NTBQuirks are played on DL NTBs (CarrierOptions.NTBQuirks).
	NTBQuirks NTBQuirks
	// Echo sends every UL packet back on DL, on its session, aggregated
	// per UL transfer.
	Echo bool
	// OnPacket, if set, sees every UL IP packet on the device goroutine;
	// pkt is only valid during the call.
	OnPacket func(session uint8, pkt []byte)

	port  atomic.Pointer[sim.Port]
	mu    sync.Mutex // guards fr (Send from tests, Echo from Receive)
	fr    *Framer
	spans []framing.Span

	// ULFrames, ULPackets: UL transfers and the IP packets in them;
	// Malformed: UL transfers that did not parse; ACKs: QMAP command
	// answers received; DLPackets: packets given to the framer.
	ULFrames, ULPackets, Malformed, ACKs, DLPackets atomic.Uint64
}

func (n *PacketNet) framer() *Framer {
	if n.fr == nil {
		n.fr = NewFramer(n.Framing, n.MaxDatagrams, n.MaxBytes)
		n.fr.num = &dlNumbering{q: n.NTBQuirks}
	}
	return n.fr
}

// Start implements sim.Function.
func (n *PacketNet) Start(p *sim.Port) { n.port.Store(p) }

// Stop implements sim.Function.
func (n *PacketNet) Stop() { n.port.Store(nil) }

// Running reports whether the pair runs (Start happens on the modem's
// goroutine shortly after the host starts both channels).
func (n *PacketNet) Running() bool { return n.port.Load() != nil }

// Receive implements sim.Function: one UL transfer, parsed strictly.
func (n *PacketNet) Receive(td []byte) {
	p := n.port.Load()
	n.ULFrames.Add(1)
	spans, err := parseUL(n.Framing, td, n.spans[:0])
	n.spans = spans
	if err != nil {
		n.Malformed.Add(1)
		if p != nil {
			p.Violation(ruleULFraming, "UL transfer of %d bytes: %v", len(td), err)
		}
	}
	if n.Echo {
		n.mu.Lock()
		defer n.mu.Unlock()
	}
	for _, s := range spans {
		pkt := td[s.Off : s.Off+s.Len]
		if s.Ctrl {
			if c, err := qmap.ParseCommand(pkt); err == nil && c.Type == qmap.TypeACK {
				n.ACKs.Add(1)
			}
			continue
		}
		n.ULPackets.Add(1)
		if n.OnPacket != nil {
			n.OnPacket(s.ID, pkt)
		}
		if n.Echo && p != nil {
			_ = n.framer().Add(p, s.ID, pkt)
		}
	}
	if n.Echo && p != nil {
		_ = n.framer().Flush(p)
	}
}

// Send frames pkts for session and sends them, aggregating up to the
// limits, and flushes the last frame.
func (n *PacketNet) Send(session uint8, pkts ...[]byte) error {
	p := n.port.Load()
	if p == nil {
		return sim.ErrStopped
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	fr := n.framer()
	for _, pkt := range pkts {
		if err := fr.Add(p, session, pkt); err != nil {
			return err
		}
		n.DLPackets.Add(1)
	}
	return fr.Flush(p)
}

// SendCommand sends one QMAP command frame on DL (QMAP framings only),
// e.g. qmap.FlowControl: the host must answer it with an ACK.
func (n *PacketNet) SendCommand(c qmap.Command) error {
	if _, ok := n.Framing.(qmap.Framing); !ok {
		return errors.New("simnet: commands need QMAP framing")
	}
	p := n.port.Load()
	if p == nil {
		return sim.ErrStopped
	}
	return p.Send(qmap.AppendCommand(nil, c))
}
