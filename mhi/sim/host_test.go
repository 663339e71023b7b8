package sim

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
)

// This file is a scripted raw host: it follows docs/PROTOCOL.md step by step
// with raw register writes and DMA buffers. It deliberately does not use
// the mhi host engine, so that the modem is checked independently of it.

// testProfile has a LOOPBACK pair on the control ring, a moderated DIAG-like
// pair, and a burst-mode IP_HW0 pair on dedicated hardware rings.
func testProfile() *mhi.Profile {
	ee := mhi.EEMask(1 << mhi.EEAMSS)
	return &mhi.Profile{
		Name:    "test-modem",
		IDs:     []mhi.PCIID{{Vendor: 0x17cb, Device: 0x0306, SubVendor: 0x17cb, SubDevice: 0x010c, MatchSub: true}},
		MRU:     32768,
		Timeout: 2 * time.Second,
		Channels: []mhi.ChannelConfig{
			{Num: 0, Name: "LOOPBACK", Dir: mhi.ChanTypeOutbound, Elements: 32, EventRing: 0, EE: ee},
			{Num: 1, Name: "LOOPBACK", Dir: mhi.ChanTypeInbound, Elements: 32, EventRing: 0, EE: ee},
			{Num: 2, Name: "SAHARA", Dir: mhi.ChanTypeOutbound, Elements: 8, EventRing: 0, EE: 1 << mhi.EESBL},
			{Num: 3, Name: "SAHARA", Dir: mhi.ChanTypeInbound, Elements: 8, EventRing: 0, EE: 1 << mhi.EESBL},
			{Num: 4, Name: "DIAG", Dir: mhi.ChanTypeOutbound, Elements: 16, EventRing: 1, EE: ee},
			{Num: 5, Name: "DIAG", Dir: mhi.ChanTypeInbound, Elements: 16, EventRing: 1, EE: ee},
			{Num: 100, Name: "IP_HW0", Dir: mhi.ChanTypeOutbound, Elements: 16, EventRing: 2, EE: ee, Burst: true},
			{Num: 101, Name: "IP_HW0", Dir: mhi.ChanTypeInbound, Elements: 16, EventRing: 3, EE: ee, Burst: true},
		},
		EventRings: []mhi.EventRingConfig{
			{Kind: mhi.EventRingCtrl, Elements: 64, Channel: -1},
			{Kind: mhi.EventRingData, Elements: 32, IntModMs: 50, Channel: -1},
			{Kind: mhi.EventRingHWData, Elements: 64, IntModMs: 1, Channel: 100},
			{Kind: mhi.EventRingHWData, Elements: 64, IntModMs: 1, Channel: 101},
		},
	}
}

const waitLimit = 5 * time.Second

type rawHost struct {
	t    testing.TB
	p    *mhi.Profile
	dev  *vpci.Device
	m    *Modem
	bar  pci.BAR
	dma  pci.DMA
	msis []atomic.Uint64
	wg   sync.WaitGroup

	bhi, chdb, erdb uint64
	chCtx, evCtx    *pci.Buffer
	cmdCtx, cmdRing *pci.Buffer
	cmdWP           uint64
	ers             []*hostER
	chans           map[int]*hostChan
	violations      chan error
	lenient         bool // violations expected (fuzzing): not checked
}

type hostER struct {
	buf    *pci.Buffer
	rp, wp uint64 // host-local pointers (IOVAs)
	vec    int
}

type hostChan struct {
	num    int
	ring   *pci.Buffer
	wp     uint64 // next free slot
	burst  bool
	dbMode bool
}

// newHost plugs a modem into a vpci slot and enables bus mastering and MSI
// (what a driver's probe does). Violations are collected; in strict tests
// they fail the test unless the test drains them itself.
func newHost(t testing.TB, p *mhi.Profile, opts Options) *rawHost {
	t.Helper()
	h := &rawHost{t: t, p: p, chans: map[int]*hostChan{}, violations: make(chan error, 256)}
	opts.Strict = true
	opts.OnViolation = func(err error) {
		select {
		case h.violations <- err:
		default:
		}
	}
	dev, m, err := NewDevice(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.dev, h.m = dev, m
	t.Cleanup(h.close)
	if err := dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	h.bar, _ = dev.BAR(0)
	h.dma = dev.DMA()
	n := m.Identity().MSIVectors
	vecs, err := dev.Interrupts().Enable(n)
	if err != nil {
		t.Fatal(err)
	}
	h.msis = make([]atomic.Uint64, len(vecs))
	for i, v := range vecs {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for {
				k, err := v.Wait()
				if err != nil {
					return
				}
				h.msis[i].Add(k)
			}
		}()
	}
	return h
}

// close detaches the modem and checks nothing leaked: no goroutine of the
// modem survives, no violation was left unexamined.
func (h *rawHost) close() {
	h.dev.Close()
	h.wg.Wait()
	checkNoModemGoroutines(h.t, h.m)
	for !h.lenient {
		select {
		case err := <-h.violations:
			h.t.Errorf("unexpected violation: %v", err)
		default:
			return
		}
	}
}

// checkNoModemGoroutines fails if a goroutine of modem m is still running
// (goleak-style, scoped to one modem: its pointer is the receiver in the
// stack trace).
func checkNoModemGoroutines(t testing.TB, m *Modem) {
	t.Helper()
	ptr := fmt.Sprintf("(%p", m)
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, fn := range []string{"sim.(*Modem).run", "sim.(*Modem).runModerator"} {
				if strings.Contains(g, fn+ptr) {
					leaked = append(leaked, g)
				}
			}
		}
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("modem goroutines still running after Detach:\n%s", strings.Join(leaked, "\n\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expectViolation waits for a violation whose text contains want.
func (h *rawHost) expectViolation(want string) {
	h.t.Helper()
	timeout := time.After(waitLimit)
	for {
		select {
		case err := <-h.violations:
			if strings.Contains(err.Error(), want) {
				return
			}
			h.t.Errorf("other violation while waiting for %q: %v", want, err)
		case <-timeout:
			h.t.Fatalf("no violation containing %q", want)
		}
	}
}

func (h *rawHost) r32(off uint64) uint32    { return h.bar.Read32(off) }
func (h *rawHost) w32(off uint64, v uint32) { h.bar.Write32(off, v) }
func (h *rawHost) w64(lo uint64, v uint64) { // HIGHER first, then LOWER (§1.1)
	h.w32(lo+4, uint32(v>>32))
	h.w32(lo, uint32(v))
}

func (h *rawHost) alloc(size, align int) *pci.Buffer {
	h.t.Helper()
	b, err := h.dma.Alloc(size, align)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

func (h *rawHost) state() mhi.State {
	return mhi.State(mhi.Field(h.r32(mhi.RegMHISTATUS), mhi.StatusStateMask, mhi.StatusStateShift))
}

func (h *rawHost) ee() mhi.EE { return mhi.EE(h.r32(h.bhi + mhi.BHIExecEnv)) }

// waitFor polls cond (as the host's 25 ms polls would, faster).
func (h *rawHost) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// powerUp is §4.3 + §4.5 up to (not including) M0: INTVEC, READY, MMIO
// programming, software event ring seeding.
func (h *rawHost) powerUp() {
	h.t.Helper()
	h.bhi = uint64(h.r32(mhi.RegBHIOFF))
	h.w32(h.bhi+mhi.BHIIntVec, 0)
	if ee := h.ee(); !ee.PowerUpCapable() {
		h.t.Fatalf("EE %s at power-up", ee)
	}
	h.waitReady()
	h.programMMIO()
}

func (h *rawHost) waitReady() {
	h.t.Helper()
	h.waitFor("MHICTRL.RESET clear", func() bool { return h.r32(mhi.RegMHICTRL)&mhi.CtrlReset == 0 })
	h.waitFor("READY", func() bool { return h.r32(mhi.RegMHISTATUS)&mhi.StatusReady != 0 })
	if s := h.state(); s != mhi.StateReady {
		h.t.Fatalf("MHISTATUS state %s, want READY", s)
	}
}

// programMMIO is mhi_init_mmio (§1.1 order) plus event ring seeding (§2.2).
func (h *rawHost) programMMIO() {
	h.t.Helper()
	h.chdb = uint64(h.r32(mhi.RegCHDBOFF))
	h.erdb = uint64(h.r32(mhi.RegERDBOFF))
	ner := len(h.p.EventRings)
	if h.chCtx == nil {
		h.chCtx = h.alloc(mhi.MaxChannels*mhi.ContextSize, 4096)
		h.evCtx = h.alloc(ner*mhi.ContextSize, 4096)
		h.cmdCtx = h.alloc(mhi.ContextSize, 64)
		h.cmdRing = h.alloc(128*mhi.ElementSize, 128*mhi.ElementSize)
		for i, e := range h.p.EventRings {
			size := e.Elements * mhi.ElementSize
			h.ers = append(h.ers, &hostER{buf: h.alloc(size, size), vec: i + 1})
		}
	}
	// Command ring: rp = wp = rbase.
	h.cmdWP = h.cmdRing.IOVA
	mhi.Context{RBase: h.cmdRing.IOVA, RLen: uint64(h.cmdRing.Len()), RP: h.cmdWP, WP: h.cmdWP}.Encode(h.cmdCtx.Mem)
	for i, e := range h.p.EventRings {
		er := h.ers[i]
		er.rp = er.buf.IOVA
		clear(er.buf.Mem)
		mhi.Context{
			W0: uint32(e.IntModMs) << mhi.EvIntModTShift, W1: mhi.EvTypeValid, W2: uint32(er.vec),
			RBase: er.buf.IOVA, RLen: uint64(er.buf.Len()), RP: er.rp, WP: er.rp,
		}.Encode(h.evCtx.Mem[i*mhi.ContextSize:])
	}
	h.w64(mhi.RegCCABAPLower, h.chCtx.IOVA)
	h.w64(mhi.RegECABAPLower, h.evCtx.IOVA)
	h.w64(mhi.RegCRCBAPLower, h.cmdCtx.IOVA)
	h.w64(mhi.RegMHICTRLBASELower, 0)
	h.w64(mhi.RegMHIDATABASELower, 0)
	h.w64(mhi.RegMHICTRLLIMITLower, 0xFFFFFFFF)
	h.w64(mhi.RegMHIDATALIMITLower, 0xFFFFFFFF)
	cfg := h.r32(mhi.RegMHICFG)
	cfg = mhi.SetField(cfg, mhi.CfgFieldMask<<mhi.CfgNERShift, mhi.CfgNERShift, uint32(ner))
	h.w32(mhi.RegMHICFG, cfg)
	cfg = mhi.SetField(cfg, mhi.CfgFieldMask<<mhi.CfgNHWERShift, mhi.CfgNHWERShift, 2)
	h.w32(mhi.RegMHICFG, cfg)
	// Seed every ring (the software ones at READY, the hardware ones at
	// mission mode in Linux; this host seeds all at once).
	for i := range h.ers {
		h.seed(i)
	}
}

func (h *rawHost) seed(i int) {
	er := h.ers[i]
	er.wp = er.buf.IOVA + uint64(er.buf.Len()) - mhi.ElementSize
	h.evCtx.Store64(i*mhi.ContextSize+mhi.CtxWP, er.wp)
	h.w64(h.erdb+uint64(8*i), er.wp)
}

// setState writes MHICTRL.MHISTATE with a read-modify-write.
func (h *rawHost) setState(s mhi.State) {
	v := h.r32(mhi.RegMHICTRL)
	h.w32(mhi.RegMHICTRL, mhi.SetField(v, mhi.CtrlStateMask, mhi.CtrlStateShift, uint32(s)))
}

// toMissionMode is READY → M0 → STATE_CHANGE(M0) → EE_EVENT(AMSS).
func (h *rawHost) toMissionMode() {
	h.t.Helper()
	before := h.msis[1].Load()
	h.setState(mhi.StateM0)
	h.expectState(mhi.StateM0)
	h.expectEE(mhi.EEAMSS)
	h.waitFor("MSI on ER0's vector", func() bool { return h.msis[1].Load() > before })
	if ee := h.ee(); ee != mhi.EEAMSS {
		h.t.Fatalf("BHI_EXECENV %s after EE_EVENT(AMSS)", ee)
	}
}

// nextEvent waits for the device to move ring i's context rp, validates it
// (§5.5: inside the ring, aligned), consumes one element and recycles it.
func (h *rawHost) nextEvent(i int) mhi.Element {
	h.t.Helper()
	el, ok := h.pollEvent(i, waitLimit)
	if !ok {
		h.t.Fatalf("no event on ring %d", i)
	}
	return el
}

func (h *rawHost) pollEvent(i int, limit time.Duration) (mhi.Element, bool) {
	h.t.Helper()
	er := h.ers[i]
	base, end := er.buf.IOVA, er.buf.IOVA+uint64(er.buf.Len())
	deadline := time.Now().Add(limit)
	for {
		dev := h.evCtx.Load64(i*mhi.ContextSize + mhi.CtxRP)
		if dev < base || dev >= end || (dev-base)%16 != 0 {
			h.t.Fatalf("ring %d: device rp %#x outside [%#x,%#x)", i, dev, base, end)
		}
		if dev != er.rp {
			break
		}
		if time.Now().After(deadline) {
			return mhi.Element{}, false
		}
		time.Sleep(50 * time.Microsecond)
	}
	el := mhi.DecodeElement(er.buf.Mem[er.rp-base:])
	er.rp += 16
	if er.rp == end {
		er.rp = base
	}
	er.wp += 16
	if er.wp == end {
		er.wp = base
	}
	h.evCtx.Store64(i*mhi.ContextSize+mhi.CtxWP, er.wp)
	h.w64(h.erdb+uint64(8*i), er.wp)
	return el, true
}

// noEvent checks that ring i stays quiet for d.
func (h *rawHost) noEvent(i int, d time.Duration) {
	h.t.Helper()
	if el, ok := h.pollEvent(i, d); ok {
		h.t.Fatalf("unexpected event on ring %d: type %#x code %s ch %d", i, el.Type(), el.Code(), el.Chan())
	}
}

func (h *rawHost) expectState(s mhi.State) {
	h.t.Helper()
	el := h.nextEvent(0)
	if el.Type() != mhi.TypeStateChange || el.State() != s {
		h.t.Fatalf("event type %#x state %s, want STATE_CHANGE(%s)", el.Type(), el.State(), s)
	}
}

func (h *rawHost) expectEE(ee mhi.EE) {
	h.t.Helper()
	el := h.nextEvent(0)
	if el.Type() != mhi.TypeEEEvent || el.EE() != ee {
		h.t.Fatalf("event type %#x EE %s, want EE_EVENT(%s)", el.Type(), el.EE(), ee)
	}
}

// sendCommand queues a command element and rings CRDB; it returns the
// element's IOVA.
func (h *rawHost) sendCommand(typ uint8, ch int) uint64 {
	addr := h.cmdWP
	mhi.Command(typ, ch).Encode(h.cmdRing.Mem[addr-h.cmdRing.IOVA:])
	h.cmdWP += 16
	if h.cmdWP == h.cmdRing.IOVA+uint64(h.cmdRing.Len()) {
		h.cmdWP = h.cmdRing.IOVA
	}
	h.cmdCtx.Store64(mhi.CtxWP, h.cmdWP)
	h.w64(mhi.RegCRDBLower, h.cmdWP)
	return addr
}

// command sends a command and waits for its completion (§4.7).
func (h *rawHost) command(typ uint8, ch int) mhi.Code {
	h.t.Helper()
	addr := h.sendCommand(typ, ch)
	el := h.nextEvent(0)
	if el.Type() != mhi.TypeCmdComplete || el.Ptr != addr {
		h.t.Fatalf("event type %#x ptr %#x, want command completion for %#x", el.Type(), el.Ptr, addr)
	}
	return el.Code()
}

func (h *rawHost) chState(ch int) mhi.ChanState {
	return mhi.ChanState(h.chCtx.Load32(ch*mhi.ContextSize) & mhi.ChCfgStateMask)
}

// initChannel is mhi_init_chan_ctxt (§2.1 step 2).
func (h *rawHost) initChannel(num int) *hostChan {
	cc, ok := h.p.Channel(num)
	if !ok {
		h.t.Fatalf("no channel %d", num)
	}
	c := h.chans[num]
	if c == nil {
		size := cc.Elements * mhi.ElementSize
		c = &hostChan{num: num, ring: h.alloc(size, size), burst: cc.Burst}
		h.chans[num] = c
	}
	c.wp, c.dbMode = c.ring.IOVA, true
	mhi.Context{
		W0: mhi.ChCfg(mhi.ChanEnabled, cc.Burst), W1: uint32(cc.Dir), W2: uint32(cc.EventRing),
		RBase: c.ring.IOVA, RLen: uint64(c.ring.Len()), RP: c.wp, WP: c.wp,
	}.Encode(h.chCtx.Mem[num*mhi.ContextSize:])
	return c
}

// startChannel initialises the context and sends START_CHAN.
func (h *rawHost) startChannel(num int) *hostChan {
	h.t.Helper()
	c := h.initChannel(num)
	if code := h.command(mhi.TypeStartCmd, num); code != mhi.CodeSuccess {
		h.t.Fatalf("START_CHAN %d: %s", num, code)
	}
	if s := h.chState(num); s != mhi.ChanRunning {
		h.t.Fatalf("channel %d context CHSTATE %s after START, want RUNNING", num, s)
	}
	return c
}

// queue writes a TRE at the channel's wp and publishes it: context wp,
// then (unless a burst channel has left doorbell mode) the doorbell.
func (h *rawHost) queue(c *hostChan, buf uint64, n int, flags uint32) uint64 {
	addr := c.wp
	h.writeTRE(c, mhi.TRE(buf, n, flags))
	h.publish(c)
	return addr
}

func (h *rawHost) writeTRE(c *hostChan, el mhi.Element) {
	el.Encode(c.ring.Mem[c.wp-c.ring.IOVA:])
	c.wp += 16
	if c.wp == c.ring.IOVA+uint64(c.ring.Len()) {
		c.wp = c.ring.IOVA
	}
}

func (h *rawHost) publish(c *hostChan) {
	h.chCtx.Store64(c.num*mhi.ContextSize+mhi.CtxWP, c.wp)
	if !c.burst || c.dbMode {
		h.ring(c)
		if c.burst {
			c.dbMode = false
		}
	}
}

func (h *rawHost) ring(c *hostChan) { h.w64(h.chdb+uint64(8*c.num), c.wp) }

// expectTx waits for a TX event on ring i.
func (h *rawHost) expectTx(i, ch int, code mhi.Code) mhi.Element {
	h.t.Helper()
	el := h.nextEvent(i)
	if el.Type() != mhi.TypeTxEvent || el.Chan() != uint8(ch) || el.Code() != code {
		h.t.Fatalf("ring %d: event type %#x ch %d code %s len %d, want TX ch %d %s", i, el.Type(), el.Chan(), el.Code(), el.Len(), ch, code)
	}
	return el
}

// upToMissionMode is the whole bring-up.
func (h *rawHost) upToMissionMode() {
	h.t.Helper()
	h.powerUp()
	h.toMissionMode()
}

// fill returns a buffer of n bytes with a recognisable pattern.
func (h *rawHost) fill(n int, seed byte) *pci.Buffer {
	b := h.alloc(max(n, 1), 8)
	for i := range b.Mem {
		b.Mem[i] = seed + byte(i*7)
	}
	return b
}

func same(a, b []byte) bool { return bytes.Equal(a, b) }

// tryEvent consumes one event of ring i if there is one, handling DB_MODE
// as the host does (§5.3): back to doorbell mode, ring again.
func (h *rawHost) tryEvent(i int) (mhi.Element, bool) {
	er := h.ers[i]
	base, end := er.buf.IOVA, er.buf.IOVA+uint64(er.buf.Len())
	if h.evCtx.Load64(i*mhi.ContextSize+mhi.CtxRP) == er.rp {
		return mhi.Element{}, false
	}
	el := mhi.DecodeElement(er.buf.Mem[er.rp-base:])
	if er.rp += 16; er.rp == end {
		er.rp = base
	}
	if er.wp += 16; er.wp == end {
		er.wp = base
	}
	h.evCtx.Store64(i*mhi.ContextSize+mhi.CtxWP, er.wp)
	h.w64(h.erdb+uint64(8*i), er.wp)
	if el.Type() == mhi.TypeTxEvent && el.Code() == mhi.CodeDBMode {
		if c := h.chans[int(el.Chan())]; c != nil {
			h.ring(c)
		}
		return el, false
	}
	return el, true
}
