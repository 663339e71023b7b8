package link

import (
	"io"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link/framing"
)

// Tap writes IP packets to a standard pcap stream (gopacket's pcapgo;
// link type RAW: each record is an IPv4 or IPv6 packet; microsecond
// timestamps), which tcpdump, tshark and Wireshark read. It is the one
// pcap writer of the module: an Endpoint writes what crosses the link to
// it (SetTap), stack.Stack.CapturePcap what the stack's NIC sees
// (WritePacketBuffer).
//
// Writes are serialized and happen on the data path's goroutines, so a
// slow io.Writer slows the link down. After the first write error the tap
// stops writing. Writing a packet does not allocate (beyond what the
// io.Writer does).
type Tap struct {
	mu      sync.Mutex
	w       *pcapgo.Writer
	out     firstError // what w writes to
	snaplen int
	buf     []byte // WritePacketBuffer's contiguous copy, snaplen bytes
	packets uint64
	stopped bool
}

// NewTap writes the pcap file header to w and returns the tap. snaplen
// bounds the bytes kept per packet (0: 65535).
func NewTap(w io.Writer, snaplen int) (*Tap, error) {
	if snaplen <= 0 {
		snaplen = framing.MaxFrame
	}
	t := &Tap{out: firstError{w: w}, snaplen: snaplen}
	t.w = pcapgo.NewWriter(&t.out)
	if err := t.w.WriteFileHeader(uint32(snaplen), layers.LinkTypeRaw); err != nil {
		return nil, t.out.err
	}
	return t, nil
}

// SetTap starts (or, with nil, stops) capturing what the endpoint sends
// and receives: RX packets as the poller takes them (before GRO), TX
// packets as the writer frames them (after GSO is cut). A packet already
// on its way may still reach the old tap after SetTap returns: call its
// Stop before closing the file.
func (e *Endpoint) SetTap(t *Tap) { e.tap.Store(t) }

// write writes one packet held in p.
func (t *Tap) write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.out.err != nil {
		return
	}
	t.record(p[:min(len(p), t.snaplen)], len(p))
}

// WritePacketBuffer writes pkt (its headers and payload, starting with
// the IP header) as one record, cut to the snap length. The data path
// calls it for every packet while a capture runs.
func (t *Tap) WritePacketBuffer(pkt *stack.PacketBuffer) {
	n := pkt.Size()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.out.err != nil {
		return
	}
	if t.buf == nil {
		t.buf = make([]byte, t.snaplen)
	}
	b := t.buf[:min(n, t.snaplen)]
	vl, off := pkt.AsViewList()
	k := 0
	for v := vl.Front(); v != nil && k < len(b); v = v.Next() {
		s := v.AsSlice()
		if off >= len(s) {
			off -= len(s)
			continue
		}
		k += copy(b[k:], s[off:])
		off = 0
	}
	t.record(b[:k], n)
}

// record writes data, the first len(data) of n bytes, with t.mu held.
func (t *Tap) record(data []byte, n int) {
	ci := gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(data), Length: n}
	if t.w.WritePacket(ci, data) == nil {
		t.packets++
	}
}

// Stop ends the capture: once it returns the tap writes nothing more
// (detach it first with SetTap(nil) or the stack's stop). It does not
// close the io.Writer. It returns the first write error, if any, as the
// io.Writer returned it.
func (t *Tap) Stop() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	return t.out.err
}

// Packets returns how many packets the tap wrote.
func (t *Tap) Packets() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.packets
}

// Err returns the first write error, if any, as the io.Writer returned it.
func (t *Tap) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.err
}

// firstError passes writes to w until one fails and keeps that error
// unwrapped (pcapgo wraps some with %v, which errors.Is cannot see
// through); later writes fail with it without reaching w.
type firstError struct {
	w   io.Writer
	err error
}

func (f *firstError) Write(b []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.w.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	f.err = err
	return n, err
}
