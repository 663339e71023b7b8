package link

import (
	"github.com/mhistack/mhistack/link/framing"
	"io"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Tap writes every IP packet the endpoint sends or receives to a standard
// pcap file (link type RAW: each record is an IPv4 or IPv6 packet), which
// tcpdump, tshark and Wireshark read. RX packets are written by the poller
// before GRO, TX packets by the writer as they are framed.
type Tap struct {
	mu      sync.Mutex
	w       *pcapgo.Writer
	snaplen int
	err     error
	packets uint64
}

// NewTap writes the pcap file header to w and returns the tap. snaplen
// bounds the bytes kept per packet (0: 65535).
func NewTap(w io.Writer, snaplen int) (*Tap, error) {
	if snaplen <= 0 {
		snaplen = framing.MaxFrame
	}
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(uint32(snaplen), layers.LinkTypeRaw); err != nil {
		return nil, err
	}
	return &Tap{w: pw, snaplen: snaplen}, nil
}

// SetTap starts (or, with nil, stops) capturing.
func (e *Endpoint) SetTap(t *Tap) { e.tap.Store(t) }

func (t *Tap) write(p []byte) {
	ci := gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: min(len(p), t.snaplen), Length: len(p)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	if err := t.w.WritePacket(ci, p[:ci.CaptureLength]); err != nil {
		// Keep the first error; a broken writer must not slow the
		// data path with a failure per packet.
		t.err = err
		return
	}
	t.packets++
}

// Packets returns how many packets the tap wrote.
func (t *Tap) Packets() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.packets
}

// Err returns the first write error, if any.
func (t *Tap) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}
