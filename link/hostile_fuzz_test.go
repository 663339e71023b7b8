package link_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/linktest"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// Malicious-device fuzzing (docs/RELIABILITY.md). The emulated modem plays a
// hostile device against a full host: an mhi.Controller in mission mode
// with a link.Endpoint on its data channel pair, carrying traffic. The
// fuzzer chooses what the device writes into host memory:
//
//   - events on any event ring (sim.InjectEvent): TX events with any
//     channel id, completion code, length and TRE pointer (inside the DL,
//     UL, event or command ring, or anywhere), and raw 16-byte elements
//     (state changes, EE changes, command completions, unknown types);
//   - event ring context read pointers (sim.CorruptEventRP), inside the
//     ring or anywhere;
//   - DL frames (raw IP, QMAP v5 or MBIM NTB16, chosen by the first
//     byte): raw fuzzer bytes or a valid frame with one byte changed;
//
// while the host also sends UL packets. The host must not panic, must not
// hang (every iteration runs under a watchdog that crashes the process
// with all goroutine stacks), must not make the device touch memory it did
// not map (the vpci IOMMU logs every refused DMA) and must free every DMA
// buffer it allocated once the endpoint and the controller are closed.

// hostileLimit bounds one iteration, setup and teardown included: the
// watchdog is a hang detector, not a speed check. A healthy iteration
// takes milliseconds, but one the hostile device starves may use every
// bounded wait runHostile and the host allow, each in wall time: 5 s for
// the port and the DL buffers, up to 256 ops of at most EventWait (20 ms)
// each, 5 s for the endpoint Close's channel resets, 2 controller
// timeouts (1 s) for the controller Close's power-down: about 16 s
// before setup and before the time a loaded 2-core CI machine running
// -race adds between the waits. 20 s was that sum, not a hang bound
// (the watchdog fired once in a full go test run at load 24); a real
// hang stays one forever and still crashes the process at 90 s, naming
// the phase it was stuck in.
const hostileLimit = 90 * time.Second

// hostileSetups are the framings the first fuzz byte selects.
var hostileSetups = []struct {
	profile, channel string
	framing          framing.Framing
}{
	{"qcom-sdx55m", "IP_HW0", framing.RawIP{}},
	{"qcom-sdx55m", "IP_HW0", qmap.Framing{Version: 5}},
	{"quectel-rm5xx", "IP_HW0_MBIM", mbim.NTB{}},
}

// Script operations: one byte each, followed by its operands.
const (
	opTxEvent   = iota // ring, chan, code, len16, ptr
	opRawEvent         // ring, 16 bytes
	opCorruptRP        // ring, ptr
	opDLRaw            // len8, bytes
	opDLMutated        // offset, value
	opULPacket         // size8
	opPause            // (none): let the poller and refiller run
	opCount
)

// Pointer operand modes: a selector byte, then an index or raw value.
const (
	ptrDL = iota
	ptrUL
	ptrEvent
	ptrCmd
	ptrRaw
	ptrModes
)

func FuzzHostileDevice(f *testing.F) {
	// Seeds: one meaningful case per weapon, on each framing.
	le := binary.LittleEndian
	u16 := func(v uint16) []byte { return le.AppendUint16(nil, v) }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	// A completion of the next DL TRE the host queued, with an EOT code
	// and an overlong length.
	seedNextDL := cat([]byte{opULPacket, 200, opTxEvent, 0, 0, byte(mhi.CodeEOT)}, u16(0xFFFF), []byte{ptrDL, 0})
	// A completion of a TRE outside every ring.
	seedOutside := cat([]byte{opTxEvent, 0, 1, byte(mhi.CodeEOT)}, u16(100), []byte{ptrRaw}, le.AppendUint64(nil, 0xdead0000))
	// A never-ending OVERFLOW chain named on every DL slot.
	var seedOverflow []byte
	for i := range 40 {
		seedOverflow = append(seedOverflow, cat([]byte{opTxEvent, 0, 0, byte(mhi.CodeOverflow)}, u16(0x800), []byte{ptrDL, byte(i)})...)
	}
	// The rp moved outside the ring, then back inside behind the host.
	seedRP := cat([]byte{opCorruptRP, 0, ptrRaw}, le.AppendUint64(nil, 0xffff_ffff_ffff_fff0),
		[]byte{opPause, opCorruptRP, 0, ptrEvent, 0xff, opPause, opCorruptRP, 1, ptrEvent, 3})
	// State and EE changes the device is not in, and a command completion
	// naming the command ring.
	raw := func(ring byte, ev mhi.Element) []byte {
		b := make([]byte, 16)
		ev.Encode(b)
		return append([]byte{opRawEvent, ring}, b...)
	}
	seedState := cat(raw(0, mhi.StateChangeEvent(mhi.StateSysErr)), []byte{opPause},
		raw(0, mhi.EEEvent(mhi.EEPBL)), raw(0, mhi.CmdCompletionEvent(0x1000, mhi.CodeSuccess)),
		[]byte{opULPacket, 60})
	// DL frames: garbage, a valid frame with its length field broken.
	seedDL := cat([]byte{opDLRaw, 5}, make([]byte, 40), []byte{opDLMutated, 2, 0xff, opDLMutated, 0, 0x00, opPause})
	for setup := range byte(len(hostileSetups)) {
		for _, s := range [][]byte{seedNextDL, seedOutside, seedOverflow, seedRP, seedState, seedDL} {
			f.Add(setup, s)
		}
	}
	f.Fuzz(func(t *testing.T, setup byte, script []byte) {
		if len(script) > 2048 {
			return // longer scripts add time, not new behaviour
		}
		runHostile(t, int(setup)%len(hostileSetups), script)
	})
}

// hostileTap is the modem's function behind the data pair: it discards UL
// and lets the script send DL frames through its port.
type hostileTap struct{ port atomic.Pointer[sim.Port] }

func (h *hostileTap) Start(p *sim.Port) { h.port.Store(p) }
func (h *hostileTap) Receive([]byte)    {}
func (h *hostileTap) Stop()             { h.port.Store(nil) }

// discard is a NetworkDispatcher that drops what the endpoint delivers.
type discard struct{}

func (discard) DeliverNetworkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}
func (discard) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer)    {}

// script reads operands; past the end it yields zeros, so every script is
// a valid program.
type script struct {
	b []byte
	i int
}

func (s *script) more() bool { return s.i < len(s.b) }

func (s *script) u8() byte {
	if s.i >= len(s.b) {
		s.i++
		return 0
	}
	s.i++
	return s.b[s.i-1]
}

func (s *script) u16() uint16 { return uint16(s.u8()) | uint16(s.u8())<<8 }

func (s *script) u64() uint64 {
	return uint64(s.u16()) | uint64(s.u16())<<16 | uint64(s.u16())<<32 | uint64(s.u16())<<48
}

func (s *script) bytes(n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = s.u8()
	}
	return out
}

func runHostile(t *testing.T, setup int, prog []byte) {
	// The watchdog: a hang is a crash with every goroutine's stack, which
	// the fuzzer records with the input that caused it.
	// The phase names the step a hang is stuck in, with how long the
	// iteration took to reach it.
	start := time.Now()
	var phase atomic.Pointer[string]
	enter := func(name string) {
		s := fmt.Sprintf("%s (entered after %v)", name, time.Since(start).Round(time.Millisecond))
		phase.Store(&s)
	}
	enter("setup")
	watchdog := time.AfterFunc(hostileLimit, func() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("hostile device: iteration still running after %v (host hang) in phase %s\n%s", hostileLimit, *phase.Load(), buf))
	})
	defer watchdog.Stop()

	st := hostileSetups[setup]
	p, ok := mhi.Lookup(st.profile)
	if !ok {
		t.Fatalf("no profile %s", st.profile)
	}
	var faultMu sync.Mutex
	var faults []vpci.Fault
	tap := &hostileTap{}
	// The rig's teardown is not used: a hostile device may leave the
	// power-down unanswered, and the buffers must be counted between the
	// controller's Close and the device's.
	r, err := linktest.Start(linktest.Options{
		Options: mhitest.Options{
			Profile: p,
			Sim: sim.Options{
				// A host reacting to lies may look wrong to the device (it
				// stops consuming a ring whose rp is garbage); the device's
				// complaints are not the host's bugs here.
				OnViolation: func(error) {},
				// Keep a stalled ring or a full DL queue from costing the
				// iteration a second.
				EventWait:   20 * time.Millisecond,
				SendTimeout: 5 * time.Millisecond,
			},
			Bus: []vpci.Option{vpci.WithFaultHandler(func(f vpci.Fault) {
				faultMu.Lock()
				faults = append(faults, f)
				faultMu.Unlock()
			})},
			Controller: mhi.Options{Timeout: 500 * time.Millisecond},
		},
		Link:     link.Options{Channel: st.channel, Framing: st.framing, TXTimeout: 5 * time.Millisecond},
		Function: tap,
	})
	if err != nil {
		t.Fatal(err)
	}
	dev, m, c, ep := r.Device, r.Modem, r.Controller, r.Endpoint
	defer dev.Close()
	defer enter("device Close") // runs before dev.Close
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ep.Attach(discard{})
	enter("waiting for the port and DL buffers")
	for tap.port.Load() == nil && ctx.Err() == nil {
		time.Sleep(100 * time.Microsecond)
	}

	ul, dl := ep.Channels()
	// The refiller runs on its own: wait for DL buffers, so that the
	// script's TRE pointers name outstanding TREs deterministically.
	for dl.Outstanding() == 0 && ctx.Err() == nil {
		time.Sleep(100 * time.Microsecond)
	}
	nER := len(p.EventRings)
	rings := []*mhi.EventRing{dl.EventRing(), ul.EventRing()}
	if er0, err := c.EventRing(0); err == nil {
		rings = append(rings, er0)
	}
	ring := func(b byte) int {
		if int(b) < len(rings) {
			return rings[b].Index()
		}
		return int(b) % nER
	}
	// The host's rings as the device read them from their contexts.
	type span struct {
		base uint64
		n    int
		ok   bool
	}
	var spans [ptrModes]span
	spans[ptrDL].base, spans[ptrDL].n, spans[ptrDL].ok = m.ChannelRing(dl.Num())
	spans[ptrUL].base, spans[ptrUL].n, spans[ptrUL].ok = m.ChannelRing(ul.Num())
	spans[ptrEvent].base, spans[ptrEvent].n, spans[ptrEvent].ok = m.EventRing(rings[0].Index())
	spans[ptrCmd].base, spans[ptrCmd].n, spans[ptrCmd].ok = m.CommandRing()
	ptr := func(s *script) uint64 {
		mode := s.u8() % ptrModes
		switch mode {
		case ptrDL, ptrUL, ptrEvent, ptrCmd:
			if sp := spans[mode]; sp.ok {
				return sp.base + uint64(int(s.u8())%sp.n)*mhi.ElementSize
			}
		}
		return s.u64()
	}
	chanID := func(b byte) int {
		switch b % 4 {
		case 0:
			return dl.Num()
		case 1:
			return ul.Num()
		}
		return int(b)
	}
	valid := validFrame(st.framing)

	enter("script")
	s := &script{b: prog}
	for ops := 0; s.more() && ops < 256; ops++ {
		switch s.u8() % opCount {
		case opTxEvent:
			r, ch, code, n := ring(s.u8()), chanID(s.u8()), mhi.Code(s.u8()), int(s.u16())
			_ = m.InjectEvent(r, mhi.TxEvent(ptr(s), n, code, ch))
		case opRawEvent:
			r := ring(s.u8())
			_ = m.InjectEvent(r, mhi.DecodeElement(s.bytes(16)))
		case opCorruptRP:
			r := ring(s.u8())
			_ = m.CorruptEventRP(r, ptr(s))
		case opDLRaw:
			b := s.bytes(int(s.u8()) * 8)
			if port := tap.port.Load(); port != nil && len(b) > 0 {
				_ = port.Send(b)
			}
		case opDLMutated:
			b := append([]byte(nil), valid...)
			b[int(s.u8())%len(b)] = s.u8()
			if port := tap.port.Load(); port != nil {
				_ = port.Send(b)
			}
		case opULPacket:
			writeUL(ep, udp4Packet(20+int(s.u8())*4))
		case opPause:
			time.Sleep(time.Millisecond)
		}
	}

	// Let the host consume what was posted last, so that the script's
	// end is judged by the host's reaction and not only by Close racing
	// with it (which the ops already exercise).
	time.Sleep(2 * time.Millisecond)
	ls := ep.Stats()
	enter("endpoint Close")
	ep.Close()
	ep.Wait()
	// What the host refused or dropped, so that a seed can be checked to
	// reach the code it is meant for (go test -v).
	t.Logf("%s: invalid events %d, RX frames %d errors %d drops %+v, TX %d",
		st.framing.Name(), c.Stats().InvalidEvents, ls.RXFrames, ls.RXErrors, ls.RXDrops, ls.TXPackets)
	enter("controller Close")
	if err := c.Close(); err != nil {
		// A hostile device may leave the power-down unanswered; the
		// controller must still have released everything.
		t.Logf("controller Close: %v", err)
	}
	if n := dev.MappedBuffers(); n != 0 {
		t.Errorf("%d host DMA buffers still mapped after Close (leak)", n)
	}
	faultMu.Lock()
	defer faultMu.Unlock()
	for _, f := range faults {
		t.Errorf("DMA fault: %v (the host handed the device memory it had not mapped)", f)
	}
}

// writeUL sends one packet; a refusal (backpressure, link down) is fine.
func writeUL(ep *link.Endpoint, pkt []byte) {
	var l stack.PacketBufferList
	l.PushBack(stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(pkt)}))
	defer l.DecRef()
	_, _ = ep.WritePackets(l)
}

// udp4Packet is a valid IPv4/UDP packet of n bytes (at least 28) with a
// correct header checksum and no UDP checksum (legal for IPv4).
func udp4Packet(n int) []byte {
	n = max(n, 28)
	b := make([]byte, n)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	b[8], b[9] = 64, 17
	copy(b[12:], []byte{10, 0, 0, 2, 10, 0, 0, 1})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(b[20:], 5353)
	binary.BigEndian.PutUint16(b[22:], 40000)
	binary.BigEndian.PutUint16(b[24:], uint16(n-20))
	return b
}

// validFrame is one DL frame of two packets in framing fr, built with the
// framing's own encoder, for the mutation operation.
func validFrame(fr framing.Framing) []byte {
	buf := make([]byte, 4096)
	enc := fr.NewEncoder()
	enc.Begin(buf)
	for _, n := range []int{60, 100} {
		copy(enc.Add(n), udp4Packet(n))
	}
	return buf[:enc.End()]
}
