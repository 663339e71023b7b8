package link_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/sim"
)

// holder is a dispatcher that keeps the first hold packets it is given
// (as a stack keeps packets in socket queues) and checks every packet
// against want, in order.
type holder struct {
	want func(k int) []byte
	hold int

	mu      sync.Mutex
	n       int
	held    []*stack.PacketBuffer
	heldIdx []int
	bad     []int
}

func (h *holder) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.n
	h.n++
	if len(h.held) < h.hold {
		h.held = append(h.held, pkt.IncRef())
		h.heldIdx = append(h.heldIdx, k)
		return
	}
	if !bytes.Equal(flatten(pkt), h.want(k)) {
		h.bad = append(h.bad, k)
	}
}
func (h *holder) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

func (h *holder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// check fails t for every held packet whose bytes changed and every
// packet that arrived wrong.
func (h *holder) check(t *testing.T, when string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := 0
	for i, p := range h.held {
		if !bytes.Equal(flatten(p), h.want(h.heldIdx[i])) {
			changed++
		}
	}
	if changed > 0 || len(h.bad) > 0 {
		t.Fatalf("%s: %d of %d packets held by the stack changed, %d of %d packets arrived wrong (first %v)",
			when, changed, len(h.held), len(h.bad), h.n, h.bad[:min(len(h.bad), 5)])
	}
}

func (h *holder) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.held {
		p.DecRef()
	}
	h.held, h.heldIdx, h.hold = nil, nil, 0
}

func flatten(pkt *stack.PacketBuffer) []byte {
	buf := pkt.ToBuffer()
	defer buf.Release()
	return buf.Flatten()
}

// Packets the stack holds keep their bytes while the endpoint goes on:
// their frames' DMA buffers go back to the device and are written again,
// a device scribbles over every RX buffer
// it ever had, and a SYS_ERR resets the channels and recovers; then the
// held packets are released and traffic is still right. Every RX buffer is
// home at the end (the rig's Close check), none came back twice (the
// pool's guard panics).
func TestRXPacketsHeldByTheStackKeepTheirBytes(t *testing.T) {
	const perFrame, size, frames = 32, 1500, 8
	pkts := make([][]byte, frames*perFrame)
	var fs [][]byte
	for f := range frames {
		for i := range perFrame {
			pkts[f*perFrame+i] = udp4(t, f*perFrame+i, size)
		}
		fr := qmap.Framing{Version: 5, MaxDatagrams: perFrame}
		fs = append(fs, encodeFrame(qmap.NewAggregator(fr), pkts[f*perFrame:(f+1)*perFrame]))
	}
	g := &sim.Generator{Frames: fs}
	r := newRig(t, rigOptions{fn: g, link: link.Options{Framing: qmap.Framing{Version: 5}}, noAttach: true})
	base := 0 // the index of the packet the generator's first frame starts
	h := &holder{hold: 20 * perFrame, want: func(k int) []byte { return pkts[(k-base)%len(pkts)] }}
	r.ep.Attach(h)

	// 20 frames held, 60 more through the same DMA buffers.
	g.Add(80)
	waitUntil(t, time.Minute, "80 frames delivered", func() bool { return h.count() == 80*perFrame })
	h.check(t, "after 80 frames")
	link.ScribbleRXBuffersForTest(r.ep, 0xa5)
	h.check(t, "after the device scribbled over its buffers")

	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	_, dl := r.ep.Channels()
	waitUntil(t, 15*time.Second, "recovery", func() bool {
		return r.c.Stats().Recoveries == 1 && dl.FreeCount() == 0
	})
	link.ScribbleRXBuffersForTest(r.ep, 0x5a)
	h.check(t, "after SYS_ERR recovery")

	h.release()
	h.mu.Lock()
	base = h.n
	h.mu.Unlock()
	g.SetFrames(fs)
	g.Add(40)
	waitUntil(t, time.Minute, "40 frames after recovery", func() bool { return h.count() == base+40*perFrame })
	h.check(t, "after recovery and release")
}
