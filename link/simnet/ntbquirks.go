package simnet

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/mhi"
)

// NTBQuirks are oddities of real modems' DL NTBs that the emulated
// carrier plays on an MBIM pair (docs/QUIRKS.md), on every
// ntbQuirkEvery-th NTB it sends, so that the host's handling of each is
// exercised under traffic.
type NTBQuirks struct {
	// SequenceGlitches: the NTB's wSequence restarts at 0, or repeats
	// the previous NTB's, alternately; numbering goes on from there. The
	// restart is what an X55 does after a low-power state (Linux
	// mhi_wwan_mbim.c, "net: wwan: mhi_wwan_mbim: Silence sequence
	// number glitch errors": "prev=16 curr=0"; Profile.NTBSequenceGlitches);
	// the repeat is a glitch of the same kind the host must equally take.
	SequenceGlitches bool
	// CyclicNDP: the NTB's last NDP chains back (wNextNdpIndex) to its
	// first NDP, which is itself when there is one: a walk that follows
	// it visits the same datagrams again, forever.
	CyclicNDP bool
	// NonIP: the NTB carries, in the IP session's NDP, one more datagram
	// that is not an IP packet (an ARP request), which the host must
	// drop and count.
	NonIP bool
}

// ProfileNTBQuirks returns the NTB quirks p's modem plays: the ones its
// profile documents (Profile.NTBSequenceGlitches). No model is known for
// cyclic NDP chains and non-IP datagrams; they are on only when asked for.
func ProfileNTBQuirks(p *mhi.Profile) NTBQuirks {
	return NTBQuirks{SequenceGlitches: p.NTBSequenceGlitches}
}

// Names of the NTB quirks (ParseNTBQuirks, `mhictl sim serve -ntb-quirk`).
const (
	NTBQuirkSequence = "ntb-sequence" // NTBQuirks.SequenceGlitches
	NTBQuirkCyclic   = "ntb-cyclic"   // NTBQuirks.CyclicNDP
	NTBQuirkNonIP    = "ntb-non-ip"   // NTBQuirks.NonIP
)

// ParseNTBQuirks adds to q the quirks named in the comma-separated list
// (NTBQuirkSequence, NTBQuirkCyclic, NTBQuirkNonIP); an unknown name is
// an error that lists the known ones.
func ParseNTBQuirks(q NTBQuirks, list string) (NTBQuirks, error) {
	for _, name := range strings.Split(list, ",") {
		switch strings.TrimSpace(name) {
		case NTBQuirkSequence:
			q.SequenceGlitches = true
		case NTBQuirkCyclic:
			q.CyclicNDP = true
		case NTBQuirkNonIP:
			q.NonIP = true
		default:
			return q, fmt.Errorf("simnet: unknown NTB quirk %q (want %s, %s or %s)", name, NTBQuirkSequence, NTBQuirkCyclic, NTBQuirkNonIP)
		}
	}
	return q, nil
}

// String lists the quirks on, by name ("" for none).
func (q NTBQuirks) String() string {
	var on []string
	for _, n := range []struct {
		on   bool
		name string
	}{{q.SequenceGlitches, NTBQuirkSequence}, {q.CyclicNDP, NTBQuirkCyclic}, {q.NonIP, NTBQuirkNonIP}} {
		if n.on {
			on = append(on, n.name)
		}
	}
	return strings.Join(on, ",")
}

// ntbQuirkEvery: one NTB in this many carries the NTBQuirks.
const ntbQuirkEvery = 8

// nonIPDatagram is what NTBQuirks.NonIP adds: an ARP request for
// 192.0.2.1 (RFC 826 layout, no Ethernet header). Its first nibble is 0,
// neither IPv4 nor IPv6.
var nonIPDatagram = []byte{
	0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01, // htype 1, ptype IPv4, hlen 6, plen 4, request
	0x02, 0, 0, 0, 0, 1, 192, 0, 2, 2, // sender MAC, sender IP
	0, 0, 0, 0, 0, 0, 192, 0, 2, 1, // target MAC, target IP
}

// dlNumbering numbers a modem's DL NTBs with one wSequence, as one
// device does, however many framers build them, and plays NTBQuirks on
// them. It is shared by a network's framers and safe for concurrent use.
type dlNumbering struct {
	q   NTBQuirks
	mu  sync.Mutex
	seq uint16 // wSequence of the next NTB
	n   uint64 // NTBs ended
}

// end ends the NTB b is building in buf (the buffer given to Begin) with
// the next sequence number and the quirks due, and returns its length.
func (d *dlNumbering) end(b *mbim.NTBBuilder, buf []byte) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b.Len() == 0 {
		return b.End()
	}
	d.n++
	odd := d.n%ntbQuirkEvery == 0
	if odd && d.q.NonIP {
		if dst := b.Add(len(nonIPDatagram)); dst != nil {
			copy(dst, nonIPDatagram)
		}
	}
	seq := d.seq
	if odd && d.q.SequenceGlitches {
		if (d.n/ntbQuirkEvery)%2 == 1 {
			seq = 0 // restart, as the X13s's "prev=16 curr=0"
		} else {
			seq-- // the previous NTB's number again
		}
	}
	b.SetSequence(seq)
	n := b.End()
	d.seq = seq + 1
	if odd && d.q.CyclicNDP {
		chainBack(buf[:n])
	}
	return n
}

// chainBack points the last NDP of the NTB16 ntb back at its first one
// (docs/FRAMING.md §3.1: wNdpIndex at NTH offset 10, wNextNdpIndex at NDP
// offset 6). ntb is a well-formed NTB the builder just wrote; NTB32 is
// left alone.
func chainBack(ntb []byte) {
	le := binary.LittleEndian
	if len(ntb) < 12 || le.Uint32(ntb) != mbim.NTH16Sig {
		return
	}
	first := int(le.Uint16(ntb[10:]))
	last := first
	for range len(ntb) / 16 {
		if last+8 > len(ntb) {
			return
		}
		next := int(le.Uint16(ntb[last+6:]))
		if next == 0 {
			le.PutUint16(ntb[last+6:], uint16(first))
			return
		}
		last = next
	}
}
