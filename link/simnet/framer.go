package simnet

import (
	"errors"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/sim"
)

// Defaults of DL aggregation: what ModemManager asks a QMAP modem for and
// what MBIM modems put in one 32 KiB NTB (docs/FRAMING.md §0, §7).
const (
	DefaultAggDatagrams = 32
	DefaultAggBytes     = 32768
)

// Defaults of the UL aggregation the emulated QMI modem grants in WDA Set
// Data Format (QMIConfig.ULMaxDatagrams, ULMaxSize): what Quectel modems
// grant (docs/FRAMING.md §0).
const (
	DefaultULDatagrams = 11
	DefaultULBytes     = 8192
)

// ruleULFraming names the rule a host breaks with a malformed UL frame.
const ruleULFraming = "docs/FRAMING.md §3.1/§4.1: UL frames on a framed data channel parse (NTB or QMAP)"

// Framer frames DL IP packets like a modem: raw IP sends each packet as
// it is; MBIM puts up to MaxDatagrams / MaxBytes in one NTB16 (one NDP
// per session); QMAP aggregates MAP frames (MAPv5 with a checksum header
// saying "valid"). A frame larger than the host's DL buffers is split by
// Port.Send into OVERFLOW pieces, as a modem whose MTU exceeds the host's
// MRU does (docs/PROTOCOL.md §5.8). It is not safe for concurrent use.
type Framer struct {
	enc    framing.SessionEncoder
	buf    []byte
	open   bool
	n      int
	oneOff bool // a frame for one packet larger than the limits
	// num numbers the NTBs of a network's framers as one modem does and
	// plays its NTBQuirks (nil: the builder numbers its own, no quirks).
	num *dlNumbering
	// gen counts the times the DL aggregation handed the frame to its
	// sender (dlAgg.push): a writer that waited in push tells its frame
	// from the same Framer recycled meanwhile.
	gen uint64
}

// NewFramer returns a framer for f aggregating up to maxDatagrams packets
// and maxBytes bytes per frame (0: the defaults, 32 / 32 KiB).
//
// f is raw IP (nil or framing.RawIP{}), mbim.NTB or qmap.Framing; the
// limits replace the value's own. Any other framing sends raw IP.
func NewFramer(f framing.Framing, maxDatagrams, maxBytes int) *Framer {
	if maxDatagrams <= 0 {
		maxDatagrams = DefaultAggDatagrams
	}
	if maxBytes <= 0 {
		maxBytes = DefaultAggBytes
	}
	fr := &Framer{buf: make([]byte, min(maxBytes, 0xFFFF))}
	switch f := f.(type) {
	case mbim.NTB:
		// f's MaxBytes is the UL limit; the buffer bounds DL.
		f.MaxDatagrams, f.MaxBytes = maxDatagrams, 0
		fr.enc = mbim.NewNTBBuilder(f)
	case qmap.Framing:
		f.MaxDatagrams, f.MaxBytes = maxDatagrams, maxBytes
		fr.enc = qmap.NewAggregator(f)
	}
	return fr
}

// errTooBig: a packet that does not fit an empty frame.
var errTooBig = errors.New("simnet: packet larger than a DL frame")

// Add adds one packet of session (MBIM session ID, QMAP mux ID) to the
// frame being built, sending the frame first if the packet does not fit.
func (f *Framer) Add(p *sim.Port, session uint8, pkt []byte) error {
	if f.enc == nil {
		return p.Send(pkt)
	}
	for try := 0; try < 2; try++ {
		if !f.open {
			f.enc.Begin(f.buf)
			f.open = true
		}
		f.enc.SetSession(session)
		if dst := f.enc.Add(len(pkt)); dst != nil {
			copy(dst, pkt)
			f.n++
			return nil
		}
		if f.n == 0 {
			return f.sendAlone(p, session, pkt)
		}
		if err := f.Flush(p); err != nil {
			return err
		}
	}
	return errTooBig
}

// sendAlone sends a packet larger than an empty frame in a frame of its
// own size (up to the framing's 64 KiB limit), as a modem whose MTU
// exceeds its aggregation size does.
func (f *Framer) sendAlone(p *sim.Port, session uint8, pkt []byte) error {
	buf := make([]byte, min(len(pkt)+64, 0xFFFF))
	f.enc.Begin(buf)
	f.enc.SetSession(session)
	dst := f.enc.Add(len(pkt))
	if dst == nil {
		f.enc.End()
		f.open = false
		return errTooBig
	}
	copy(dst, pkt)
	n := f.end(buf)
	f.open = false
	return p.Send(buf[:n])
}

// Flush sends the frame being built, if it holds anything.
func (f *Framer) Flush(p *sim.Port) error {
	if !f.open {
		return nil
	}
	n := f.end(f.buf)
	f.open, f.n = false, 0
	if n == 0 {
		return nil
	}
	return p.Send(f.buf[:n])
}

// end ends the frame being built in buf (the buffer given to Begin) and
// returns its length: numbered by f.num on an NTB pair.
func (f *Framer) end(buf []byte) int {
	if b, ok := f.enc.(*mbim.NTBBuilder); ok && f.num != nil {
		return f.num.end(b, buf)
	}
	return f.enc.End()
}

// knownFraming reports whether the network functions frame DL in f: raw
// IP (nil or framing.RawIP{}), mbim.NTB or qmap.Framing.
func knownFraming(f framing.Framing) bool {
	switch f.(type) {
	case nil, framing.RawIP, mbim.NTB, qmap.Framing:
		return true
	}
	return false
}

// ulChecker is a framing with UL limits a modem enforces: mbim.NTB (NTB
// OUT parameters) and qmap.Framing (WDA's UL aggregation limits).
type ulChecker interface {
	CheckUL(frame []byte, spans []framing.Span) error
}

// parseUL finds the IP packets (and QMAP commands, Span.Ctrl) of one UL
// transfer in framing f (nil: raw IP), strictly: any framing error is
// returned, and so is a frame beyond the UL limits f carries (mbim.NTB's
// MaxDatagrams, MaxBytes, Divisor, Remainder, NDPAlign; qmap.Framing's
// MaxDatagrams and MaxBytes; zero ones are not checked).
func parseUL(f framing.Framing, td []byte, spans []framing.Span) ([]framing.Span, error) {
	if f == nil {
		f = framing.RawIP{}
	}
	spans, err := f.Decode(td, spans)
	if c, ok := f.(ulChecker); ok && err == nil {
		err = c.CheckUL(td, spans)
	}
	return spans, err
}

// isRawIP reports whether f is raw IP (nil counts as raw IP, as in
// link.Options): one packet per transfer, no header to parse or build.
func isRawIP(f framing.Framing) bool {
	_, raw := f.(framing.RawIP)
	return f == nil || raw
}
