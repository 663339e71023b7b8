package simnet

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/internal/segment"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	gcsum "gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// The tail loss probe of the carrier network's TCP senders
// (CarrierOptions.NoTailLossProbe turns it off).
//
// A network's servers repair a tail loss (the last segments of a flight
// lost, nothing after them to draw duplicate ACKs) with a tail loss probe
// (RACK-TLP, RFC 8985 §7; Linux tcp_recovery=1, the default): when no ACK
// has come for a probe timeout (PTO) after the last transmission, the
// sender sends its newest segment again; the receiver SACKs it above the
// hole and SACK recovery repairs the rest, without the retransmission
// timeout. gVisor has TLP only together with its RACK, which the carrier
// runs off (NewCarrierNetwork says why), so the carrier's link does the
// probing for its TCP, per flow, from what it sees of the flow: the
// segments the carrier sends to the host and the host's ACKs.
//
// PTO follows Linux tcp_schedule_loss_probe (net/ipv4/tcp_output.c):
// 2·SRTT plus TCP_TIMEOUT_MIN (two jiffies: tlpMinTimeout), or plus
// TCP_RTO_MIN (200 ms, the delayed-ACK allowance) when one segment is out;
// no probe before the flow has an RTT sample (Linux: TCP_TIMEOUT_INIT,
// 1 s, beyond the RTO). SRTT is the link's own estimate (RFC 6298's
// smoothing of one timed segment per round trip, Karn's rule). The timer
// runs from the flow's last transmission or the last ACK that acknowledged
// new data, like Linux's, and one probe goes per tail: none again until
// the sender sends new data; none while the sender retransmits (it is in
// recovery: Linux probes only in the Open state) until everything it had
// sent then is acknowledged.
//
// What the probe sends: the newest segments, as many as carry tlpSegments
// full segments' worth of data, not Linux's one. Linux's RACK marks the
// whole hole lost on the SACK of one probe; the carrier's TCP runs RFC
// 6675 loss detection, which needs DupThresh (three) duplicate ACKs with
// new SACK information, or more than DupThresh − 1 segments' worth
// SACKed above the hole (IsLost), to start recovery. The newest segments
// are often short (the ends of the application's writes: 644 and 55
// bytes in a traced storm), and three of them SACKed were not enough:
// hence the bytes, not the count. So the host sees a few more
// duplicates than a Linux server would send, and the network's sender
// repairs the window as a Linux server does.
//
// A probe due while the data pair is stopped (a SYS_ERR) goes when it
// starts again: what the network sends while the modem is down is lost
// (carrierLink.WritePackets), but a PTO of milliseconds falls inside the
// modem's recovery, and a radio network holds a probe's few packets for a
// UE it cannot reach for a moment rather than making the server wait out
// its RTO. For the same reason a probe that went out before the pair
// stopped and drew no ACK of new data goes again when it starts: the
// crash that stopped the pair took it (the modem's DL queue and ring are
// cleared, and a probe sent between the pair's close and Stop meets a
// closed port), and it was the tail's only one, so without this the
// sender waits out its RTO after all (docs/RELIABILITY.md, "Why the
// network's one probe did not repair the tail").
//
// A duplicate ACK is, in RFC 6675 §2, any ACK that SACKs data not SACKed
// before. gVisor's sender adds RFC 5681's condition that the window be
// the one of the ACK before, and after an outage it rarely is (the
// application read meanwhile). So the one ACK that brings the SACK
// information of a whole flight at once (the host's earlier SACKs were
// lost in the modem; the probe's answer is the first to get through) is
// not counted, the ACKs after it bring nothing new, and the sender waits
// out its RTO with the hole lost in plain sight (IsLost). Likewise the
// answers to a probe, each of which SACKs one more segment below the
// block the host reported before, when one of them advertises a window
// that grew: gVisor resets its duplicate count on an ACK it does not
// count. The link hands such an ACK to the network's TCP with the
// previous ACK's window when the window grew: with the ACK number unchanged it can only grow (a
// receiver never moves its right edge back), so the sender sees a
// smaller, still valid window until the next ACK, and counts the
// duplicate (CarrierStats.SACKDupAcks).
//
// Cost: WritePackets records each TCP data packet's tail (a map look-up
// and a copy of at most tlpSegments + 1 segments into the flow's own
// buffers, which grow once to the flow's segment size), rxLoop each ACK
// (a map look-up). Flows are bounded (tlpMaxFlows) and expire after
// tlpIdle without traffic; one goroutine, started by NewCarrierNetwork and
// stopped by Close, sleeps until the earliest PTO.

const (
	// tlpSegments is how many segments' worth of a flow's newest data a
	// probe sends again: RFC 6675's DupThresh, what the carrier's TCP
	// needs SACKed above a hole to start recovery.
	tlpSegments = 3
	// tlpSlots is how many of a flow's newest segments are kept: enough
	// that those sent again carry tlpSegments full segments' worth when
	// the newest are short (the ends of the application's writes).
	tlpSlots = 2 * tlpSegments
	// tlpMinTimeout is Linux's TCP_TIMEOUT_MIN (2 jiffies) at HZ=1000,
	// added to 2·SRTT.
	tlpMinTimeout = 2 * time.Millisecond
	// tlpOneSegment is what Linux adds instead when a single segment is
	// out (TCP_RTO_MIN): the receiver may be delaying its ACK.
	tlpOneSegment = 200 * time.Millisecond
	// tlpMaxFlows bounds the flows tracked; beyond it new flows go
	// without probes.
	tlpMaxFlows = 1 << 16
	// tlpIdle is how long a flow without traffic is kept.
	tlpIdle = 60 * time.Second
)

// tlpKey names a TCP flow from the carrier's side: its address and port,
// and the host's.
type tlpKey struct {
	net, host         tcpip.Address
	netPort, hostPort uint16
}

// tlpFlow is what the prober knows of one flow. Guarded by tailProber.mu.
type tlpFlow struct {
	high, ack       seqnum.Value // end of the newest data sent; the host's highest ACK
	lastSend, acked int64        // prober clock: last data sent; last ACK of new data
	seen            int64        // last packet either way
	srtt            time.Duration
	timing          bool // a segment is being timed
	timedEnd        seqnum.Value
	timedAt         int64
	recovering      bool // the sender retransmitted: no probe until ack ≥ recover
	recover         seqnum.Value
	probed          bool         // the current tail was probed
	probeAt         int64        // prober clock: when it was probed
	probeStops      uint64       // tailProber.stops when it was probed
	again           bool         // the next probe repeats one lost with the pair
	wnd             uint16       // the window field of the host's last ACK, as delivered
	sackLow         seqnum.Value // the extent the host has SACKed above ack:
	sackHigh        seqnum.Value // [sackLow, sackHigh), empty when equal
	started         bool         // high and ack are set: the flow has sent data
	mss             int
	slots           [tlpSlots][]byte // the newest segments, a ring
	next, n         int
	proto           tcpip.NetworkProtocolNumber
	l3              int // IP header length of the slots' packets
}

// tailProber runs the probes of one CarrierNetwork.
type tailProber struct {
	cn    *CarrierNetwork
	base  time.Time
	kick  chan struct{}
	sent  atomic.Uint64 // probes sent (CarrierStats.TailLossProbes)
	again atomic.Uint64 // of them, lost probes sent again (TailLossProbesAgain)
	dups  atomic.Uint64 // ACKs given the previous window (SACKDupAcks)
	// stops counts the data pair's stops (CarrierNetwork.Stop), so that
	// a probe sent before one is known to have met it.
	stops atomic.Uint64
	mu    sync.Mutex
	flows map[tlpKey]*tlpFlow
	seg   segment.Segmenter // record's
	armed int64             // when the prober scans next; 0: it waits for a kick
	// waitPort: a probe is due but the data pair is stopped (what the
	// tests wait for; Start wakes the prober whatever it says).
	waitPort bool
}

func (t *tailProber) init(cn *CarrierNetwork) {
	t.cn, t.base = cn, time.Now()
	t.kick = make(chan struct{}, 1)
	t.flows = map[tlpKey]*tlpFlow{}
}

func (t *tailProber) now() int64 { return int64(time.Since(t.base)) }

func (t *tailProber) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// add starts tracking a flow that negotiated SACK (Linux probes only
// those: tcp_schedule_loss_probe wants tcp_is_sack); t.mu is held.
func (t *tailProber) add(k tlpKey, now int64) {
	if len(t.flows) < tlpMaxFlows {
		t.flows[k] = &tlpFlow{seen: now}
	}
}

// pto is the flow's probe timeout; 0: no probe (no RTT sample yet).
func (f *tlpFlow) pto() time.Duration {
	if f.srtt == 0 {
		return 0
	}
	if int(f.high-f.ack) <= f.mss {
		return 2*f.srtt + tlpOneSegment
	}
	return 2*f.srtt + tlpMinTimeout
}

// due returns when the flow's probe is due, or false if none is.
func (f *tlpFlow) due() (int64, bool) {
	if !f.started || !f.ack.LessThan(f.high) || f.probed || f.recovering || f.n == 0 {
		return 0, false
	}
	pto := f.pto()
	if pto == 0 {
		return 0, false
	}
	return max(f.lastSend, f.acked) + int64(pto), true
}

// tcpFlowOf parses an IP packet's TCP header: the key of its flow (dl:
// sent by the carrier, else by the host) and the TCP header. ok is false
// for anything else, fragments and IPv6 extension headers included.
func tcpFlowOf(ip []byte, dl bool) (k tlpKey, tcp header.TCP, l3 int, ok bool) {
	var src, dst tcpip.Address
	switch header.IPVersion(ip) {
	case header.IPv4Version:
		if len(ip) < header.IPv4MinimumSize {
			return k, nil, 0, false
		}
		h := header.IPv4(ip)
		l3 = int(h.HeaderLength())
		if h.TransportProtocol() != header.TCPProtocolNumber || h.More() || h.FragmentOffset() != 0 || l3 < header.IPv4MinimumSize {
			return k, nil, 0, false
		}
		src, dst = h.SourceAddress(), h.DestinationAddress()
	case header.IPv6Version:
		if len(ip) < header.IPv6MinimumSize {
			return k, nil, 0, false
		}
		h := header.IPv6(ip)
		if h.TransportProtocol() != header.TCPProtocolNumber {
			return k, nil, 0, false
		}
		l3 = header.IPv6MinimumSize
		src, dst = h.SourceAddress(), h.DestinationAddress()
	default:
		return k, nil, 0, false
	}
	if len(ip) < l3+header.TCPMinimumSize {
		return k, nil, 0, false
	}
	tcp = header.TCP(ip[l3:])
	if dl {
		k = tlpKey{net: src, host: dst, netPort: tcp.SourcePort(), hostPort: tcp.DestinationPort()}
	} else {
		k = tlpKey{net: dst, host: src, netPort: tcp.DestinationPort(), hostPort: tcp.SourcePort()}
	}
	return k, tcp, l3, true
}

// record notes a packet the carrier's stack hands its link (before the
// link knows whether the data pair takes it: a tail lost to a stopped
// pair is a tail all the same).
func (t *tailProber) record(pkt *stack.PacketBuffer) {
	if pkt.TransportProtocolNumber != header.TCPProtocolNumber {
		return
	}
	nh, th := pkt.NetworkHeader().Slice(), pkt.TransportHeader().Slice()
	// tcpFlowOf wants the TCP header right after the IP header; the
	// PacketBuffer keeps them in separate views.
	if len(th) < header.TCPMinimumSize || len(nh) > 60 {
		return
	}
	var hb [60 + header.TCPMinimumSize]byte
	n := copy(hb[:], nh)
	copy(hb[n:], th[:header.TCPMinimumSize])
	k, tcp, l3, ok := tcpFlowOf(hb[:n+header.TCPMinimumSize], true)
	if !ok {
		return
	}
	flags := tcp.Flags()
	payload := pkt.Size() - len(nh) - len(th)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.flows[k]
	if flags.Intersects(header.TCPFlagRst | header.TCPFlagSyn) {
		// Reset, or a new connection on the 4-tuple: forget the old one.
		delete(t.flows, k)
		if flags.Contains(header.TCPFlagSyn|header.TCPFlagAck) && header.ParseSynOptions(th[header.TCPMinimumSize:], true).SACKPermitted {
			t.add(k, now) // the host offered SACK, the carrier agreed
		}
		return
	}
	if payload <= 0 && !flags.Contains(header.TCPFlagFin) {
		if f != nil {
			f.seen = now
		}
		return // a bare ACK
	}
	seq := seqnum.Value(tcp.SequenceNumber())
	end := seq.Add(seqnum.Size(max(payload, 0)))

	if flags.Contains(header.TCPFlagFin) {
		end++
	}
	if f == nil {
		return // not a flow that negotiated SACK
	}
	if !f.started {
		f.started, f.high, f.ack, f.sackLow, f.sackHigh = true, seq, seq, seq, seq
	}
	f.seen, f.lastSend = now, now
	if !f.high.LessThan(end) {
		// A retransmission: the sender is in recovery (or timed out),
		// where Linux sends no probe, and its RTT is ambiguous.
		f.recovering, f.recover, f.timing = true, f.high, false
		return
	}
	f.high, f.probed, f.again = end, false, false
	if !f.timing {
		f.timing, f.timedEnd, f.timedAt = true, end, now
	}
	f.proto, f.l3 = pkt.NetworkProtocolNumber, l3
	t.keepTail(f, pkt)
	if d, ok := f.due(); ok && (t.armed == 0 || d < t.armed) {
		t.armed = d
		t.wake()
	}
}

// keepTail copies the newest segments of pkt into the flow's ring: the
// last tlpSegments MSS-sized ones, and one more when the last is short;
// t.mu is held.
func (t *tailProber) keepTail(f *tlpFlow, pkt *stack.PacketBuffer) {
	s := &t.seg
	defer s.Release()
	if !s.Reset(pkt) {
		return
	}
	keep := tlpSegments
	if g := pkt.GSOOptions; s.Cut() {
		f.mss = max(f.mss, int(g.MSS))
		if g.MSS > 0 && pkt.Data().Size()%int(g.MSS) != 0 {
			keep++
		}
	}
	for i := s.Segments(); i > keep; i-- {
		s.Skip()
	}
	for !s.Done() {
		size := s.Next()
		b := f.slots[f.next]
		if cap(b) < size {
			b = make([]byte, size, max(size, 128))
		}
		b = b[:size]
		s.Write(b)
		f.slots[f.next] = b
		f.next = (f.next + 1) % tlpSlots
		f.n = min(f.n+1, tlpSlots)
		if !s.Cut() {
			f.mss = max(f.mss, size-f.l3-int(header.TCP(b[f.l3:]).DataOffset()))
		}
	}
}

// ack notes a packet from the host (rxLoop, after its checksums passed).
func (t *tailProber) ack(p []byte) {
	k, tcp, _, ok := tcpFlowOf(p, false)
	if !ok {
		return
	}
	flags := tcp.Flags()
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.flows[k]
	if flags.Contains(header.TCPFlagSyn|header.TCPFlagAck) && int(tcp.DataOffset()) <= len(tcp) {
		// The host answers a connection the carrier opened (Dial).
		delete(t.flows, k)
		if header.ParseSynOptions(tcp.Options(), true).SACKPermitted {
			t.add(k, t.now())
		}
		return
	}
	if f == nil {
		return
	}
	if flags.Intersects(header.TCPFlagRst | header.TCPFlagSyn) {
		delete(t.flows, k)
		return
	}
	if !flags.Contains(header.TCPFlagAck) || !f.started {
		return
	}
	now := t.now()
	f.seen = now
	a := seqnum.Value(tcp.AckNumber())
	if !f.ack.LessThan(a) {
		// Acknowledges nothing new: the PTO keeps running.
		if a == f.ack && f.ack.LessThan(f.high) {
			t.sackDup(f, tcp, len(tcp)-int(tcp.DataOffset()))
		}
		f.wnd = tcp.WindowSize()
		return
	}
	f.ack, f.acked, f.wnd = a, now, tcp.WindowSize()
	if f.sackLow.LessThan(a) {
		f.sackLow = a
	}
	if f.sackHigh.LessThan(a) {
		f.sackHigh = a
	}
	if f.high.LessThan(a) {
		f.high = a
	}
	if f.timing && !a.LessThan(f.timedEnd) {
		sample := time.Duration(now - f.timedAt)
		if f.srtt == 0 {
			f.srtt = sample
		} else {
			f.srtt += (sample - f.srtt) / 8
		}
		f.timing = false
	}
	if f.recovering && !a.LessThan(f.recover) {
		f.recovering = false
	}
}

// sackDup handles an ACK from the host that acknowledges nothing new
// (tcp, carrying payload bytes of data): if it SACKs data not SACKed
// before and its window grew, it gets the window of the ACK before, so
// that the network's TCP counts it as a duplicate; t.mu is held.
//
// "Not SACKed before" is judged against the extent of what the host has
// SACKed above its ACK: a block that reaches above it or below it is
// new. The answers to a probe extend it downwards, one segment each
// (the probe sends the newest first). A block inside a gap of the
// extent is not seen as new: an ACK that brings only that passes as it
// came.
func (t *tailProber) sackDup(f *tlpFlow, tcp header.TCP, payload int) {
	off := int(tcp.DataOffset())
	if payload != 0 || off < header.TCPMinimumSize || off > len(tcp) || f.wnd == 0 {
		return
	}
	low, high, ok := sackExtent(tcp[header.TCPMinimumSize:off], f.ack, f.high)
	if !ok {
		return // no SACK block within what is outstanding
	}
	if f.sackLow != f.sackHigh && !f.sackHigh.LessThan(high) && !low.LessThan(f.sackLow) {
		return // nothing new
	}
	if f.sackLow == f.sackHigh {
		f.sackLow, f.sackHigh = low, high
	} else {
		if low.LessThan(f.sackLow) {
			f.sackLow = low
		}
		if f.sackHigh.LessThan(high) {
			f.sackHigh = high
		}
	}
	w := tcp.WindowSize()
	if w <= f.wnd {
		return
	}
	// RFC 1624 incremental update of the checksum, which stays valid.
	tcp.SetChecksum(^gcsum.Combine(gcsum.Combine(^tcp.Checksum(), ^w), f.wnd))
	tcp.SetWindowSize(f.wnd)
	t.dups.Add(1)
}

// sackExtent returns the lowest left edge and the highest right edge of
// the SACK blocks in TCP options opts that lie within (ack, high]: above
// the cumulative ACK (a D-SACK block below it reports a duplicate, RFC
// 2883) and within what was sent. ok is false if there is none. It stops
// at a malformed option.
func sackExtent(opts []byte, ack, high seqnum.Value) (low, end seqnum.Value, ok bool) {
	for i := 0; i < len(opts); {
		switch opts[i] {
		case header.TCPOptionEOL:
			return low, end, ok
		case header.TCPOptionNOP:
			i++
			continue
		}
		if i+1 >= len(opts) || opts[i+1] < 2 || i+int(opts[i+1]) > len(opts) {
			return low, end, ok
		}
		l := int(opts[i+1])
		if opts[i] == header.TCPOptionSACK && (l-2)%8 == 0 {
			for b := i + 2; b+8 <= i+l; b += 8 {
				s := seqnum.Value(uint32(opts[b])<<24 | uint32(opts[b+1])<<16 | uint32(opts[b+2])<<8 | uint32(opts[b+3]))
				e := seqnum.Value(uint32(opts[b+4])<<24 | uint32(opts[b+5])<<16 | uint32(opts[b+6])<<8 | uint32(opts[b+7]))
				if !ack.LessThan(s) || !s.LessThan(e) || high.LessThan(e) {
					continue
				}
				if !ok || s.LessThan(low) {
					low = s
				}
				if !ok || end.LessThan(e) {
					end = e
				}
				ok = true
			}
		}
		i += l
	}
	return low, end, ok
}

// run is the prober's goroutine: it sleeps until the earliest PTO, sends
// the probes due, and returns when the network closes.
func (t *tailProber) run() {
	defer t.cn.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var probes []*stack.PacketBuffer
	for {
		select {
		case <-t.kick:
		case <-timer.C:
		case <-t.cn.quit:
			timer.Stop()
			return
		}
		timer.Stop()
		probes = t.collect(probes[:0])
		if len(probes) > 0 {
			var l stack.PacketBufferList
			for _, p := range probes {
				l.PushBack(p)
			}
			t.cn.ep.writeOut(l)
			l.DecRef()
			clear(probes)
		}
		t.mu.Lock()
		next := t.armed
		t.mu.Unlock()
		if next != 0 {
			timer.Reset(time.Duration(next - t.now()))
		}
	}
}

// collect expires idle flows, appends the probes due now to probes (up to
// tlpSlots packets per flow) and sets when to scan next.
func (t *tailProber) collect(probes []*stack.PacketBuffer) []*stack.PacketBuffer {
	// stops before the port: Stop clears the port, then counts, so a
	// probe that finds the port set and is lost to a Stop records a
	// count the Stop changes.
	stops := t.stops.Load()
	portUp := t.cn.ep.port.Load() != nil
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var next int64
	soonest := func(at int64) {
		if next == 0 || at < next {
			next = at
		}
	}
	t.waitPort = false
	for k, f := range t.flows {
		if now-f.seen > int64(tlpIdle) {
			delete(t.flows, k)
			continue
		}
		due, ok := f.due()
		switch {
		case !ok:
			continue
		case due > now:
			soonest(due)
			continue
		case !portUp:
			t.waitPort = true // Start kicks
			continue
		}
		// Newest first: that one is Linux's probe. In sequence order
		// the host's GRO would merge them into one segment and answer
		// with one ACK, and the carrier's TCP counts an ACK as a
		// duplicate only if it advertises the window the previous
		// one did, which the first ACK after an outage often does
		// not (the application has read meanwhile).
		// As many of the newest segments as carry tlpSegments full
		// segments' worth.
		for i, sent := 0, 0; i < f.n && sent < tlpSegments*max(f.mss, 1); i++ {
			b := f.slots[(f.next-1-i+tlpSlots)%tlpSlots]
			sent += len(b) - f.l3 - int(header.TCP(b[f.l3:]).DataOffset())
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
			pkt.NetworkProtocolNumber = f.proto
			pkt.NetworkHeader().Consume(f.l3)
			probes = append(probes, pkt)
		}
		f.probed, f.timing = true, false
		f.probeAt, f.probeStops = now, stops
		t.sent.Add(1)
		if f.again {
			f.again = false
			t.again.Add(1)
		}
	}
	if len(t.flows) > 0 {
		soonest(now + int64(tlpIdle))
	}
	t.armed = next
	return probes
}

// probeLost reports whether the flow's probe went out before a stop of
// the data pair (stops is tailProber.stops now) and no ACK of new data
// came after it.
func (f *tlpFlow) probeLost(stops uint64) bool {
	return f.probed && f.probeStops != stops && f.acked <= f.probeAt
}

// stopped is called when the data pair stops, after the port is cleared.
func (t *tailProber) stopped() { t.stops.Add(1) }

// started is called when the data pair starts: probes that fell due while
// it was stopped go now, and so do those sent before a stop that no ACK
// of new data answered (they were lost with the pair). It always wakes
// the prober: a scan that saw the pair stopped may not have recorded
// waitPort yet (it reads the port before it takes t.mu), and without a
// scan after this one its probe would wait for the sender's RTO.
func (t *tailProber) started() {
	stops := t.stops.Load()
	t.mu.Lock()
	for _, f := range t.flows {
		if f.probeLost(stops) {
			f.probed, f.again = false, true
		}
	}
	t.mu.Unlock()
	t.wake()
}
