package main

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/experiment"
	"github.com/mhistack/mhistack/link/qmap"
	"github.com/mhistack/mhistack/mhi/sim"
)

// linkRun is one measurement of the endpoint alone: DL traffic from the
// emulated modem's generator into a counting dispatcher, optionally UL
// traffic from a writer into the generator's sink, for a window after a
// warm-up.
type linkRun struct {
	size, perFrame int // DL UDP packet size and packets per frame; perFrame 0: no DL
	// qmap is the MAP framing of aggregated DL frames (perFrame > 1); the
	// endpoint's lo.Framing must match it. csumValid: MAPv5 packets say
	// the modem validated their checksums.
	qmap      qmap.Framing
	csumValid bool
	tx        bool // a writer sends 1400-byte UDP packets UL in batches of 32
	lo        link.Options
	x         experiment.Options // lo.Experiments (measure sets ThreadHook, and Worker when shared)
	so        sim.Options
	shared    bool // refill on an experiment.Worker (Refill = RefillShared)
	hog       bool // a CPU hog process runs meanwhile
}

// txBatch is the writer's WritePackets batch: gVisor's GSO and qdisc hand
// the endpoint batches of this order.
const txBatch = 32

// measure runs lr once for the window d after warm-up w.
func (lr linkRun) measure(d, w time.Duration) (sample, error) {
	if lr.hog {
		stop, err := startHog()
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	th := newThreads()
	lo, x := lr.lo, lr.x
	x.ThreadHook = th.hook
	if lr.shared {
		worker := experiment.NewWorker(th.hook)
		defer worker.Close() // after the rig: the owner closes it last
		x.Refill, x.Worker = experiment.RefillShared, worker
	}
	lo.Experiments = &x
	g := &sim.Generator{}
	if lr.perFrame > 0 {
		frames, err := udpFrames(8, lr.perFrame, lr.size, lr.qmap, lr.csumValid)
		if err != nil {
			return nil, err
		}
		g.Frames = frames
	}
	r, err := newRig(g, lr.so, lo)
	if err != nil {
		return nil, err
	}
	cnt := &counter{}
	r.ep.Attach(cnt)
	if lr.perFrame > 0 {
		g.Add(1 << 40) // send as fast as the host posts buffers
	}
	var stopTX atomic.Bool
	var wg sync.WaitGroup
	if lr.tx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			writer(r.ep, &stopTX)
		}()
	}

	time.Sleep(w)
	type snap struct {
		t         time.Time
		st        link.Stats
		ms        sim.Stats
		rxP, rxB  uint64
		ulTD, ulB uint64
		cpu       map[string]time.Duration
		proc      time.Duration
		mallocs   uint64
	}
	var mem runtime.MemStats
	take := func() snap {
		runtime.ReadMemStats(&mem)
		s := snap{t: time.Now(), st: r.ep.Stats(), ms: r.m.Stats(), rxP: cnt.pkts.Load(), rxB: cnt.bytes.Load(),
			cpu: th.sample(), proc: processCPU(), mallocs: mem.Mallocs}
		s.ulTD, s.ulB = g.Received()
		return s
	}
	a := take()
	// Throughput stability inside the run: the rate in 50 ms slices.
	var rates []float64
	last, lastT := a.rxB, a.t
	for time.Since(a.t) < d {
		time.Sleep(50 * time.Millisecond)
		n, now := cnt.bytes.Load(), time.Now()
		rates = append(rates, float64(n-last)/now.Sub(lastT).Seconds())
		last, lastT = n, now
	}
	b := take()
	stopTX.Store(true)
	wg.Wait()
	if err := r.close(); err != nil {
		return nil, err
	}
	if th.mismatch != "" {
		return nil, fmt.Errorf("thread clock check: %s", th.mismatch)
	}

	el := b.t.Sub(a.t).Seconds()
	rxP := float64(b.rxP - a.rxP)
	txP := float64(b.ulTD - a.ulTD)
	ms := func(role string) float64 {
		d, ok := b.cpu[role]
		if !ok {
			return nan
		}
		return float64(d-a.cpu[role]) / 1e6 / el
	}
	s := sample{
		"rx_mbps":    float64(b.rxB-a.rxB) * 8 / el / 1e6,
		"rx_kpps":    rxP / el / 1e3,
		"tx_mbps":    float64(b.ulB-a.ulB) * 8 / el / 1e6,
		"tx_kpps":    txP / el / 1e3,
		"poll_ms":    ms(experiment.RolePoller),
		"refill_ms":  ms(experiment.RoleRefiller),
		"proc_ms":    float64(b.proc-a.proc) / 1e6 / el,
		"alloc_fail": float64(b.st.RXAllocFail - a.st.RXAllocFail),
		"drops":      float64(rxDrops(b.st)-rxDrops(a.st)) + float64(b.ms.DLDrops-a.ms.DLDrops),
		"polls_s":    float64(b.st.Polls-a.st.Polls) / el,
		"irq_s":      float64(b.st.Interrupts-a.st.Interrupts) / el,
		"exh_s":      float64(b.st.BudgetExhausted-a.st.BudgetExhausted) / el,
		"txfull_s":   float64(b.st.TXFull-a.st.TXFull) / el,
		"allocs_pkt": float64(b.mallocs-a.mallocs) / max(rxP+txP, 1),
	}
	if lr.shared {
		s["refill_ms"] = ms(experiment.RoleWorker)
	}
	if n := b.st.RXPackets - a.st.RXPackets; n > 0 {
		s["csum_dev"] = float64(b.st.RXChecksumDevice-a.st.RXChecksumDevice) / float64(n)
	}
	if rxP > 0 {
		s["host_ns"] = float64(b.st.PollNanos-a.st.PollNanos) / rxP
		if d, ok := b.cpu[experiment.RolePoller]; ok {
			s["poll_cpu_ns"] = float64(d-a.cpu[experiment.RolePoller]) / rxP
		}
		m, sd := meanSD(rates)
		s["cv"] = 100 * sd / m
	}
	return s, nil
}

var nan = func() float64 { var z float64; return z / z }()

func rxDrops(s link.Stats) uint64 {
	d := s.RXDrops
	return d.Oversize + d.Truncated + d.Protocol + d.Checksum + d.NotAttached + d.Backlog
}

// writer sends 1400-byte UDP packets in batches until stop is set. The
// packet buffers come from gVisor's pools, as they do for a transport
// endpoint; a full UL ring blocks WritePackets (backpressure), which is
// what paces the writer.
func writer(ep *link.Endpoint, stop *atomic.Bool) {
	pkt := udp4(1, 1400)
	// One list for every batch: Reset keeps its backing array, so the
	// writer itself allocates nothing per batch.
	var l stack.PacketBufferList
	for !stop.Load() {
		for range txBatch {
			l.PushBack(stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(pkt)}))
		}
		_, _ = ep.WritePackets(l)
		l.Reset()
	}
}
