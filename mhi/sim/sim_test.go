package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
)

func TestIdentityFromProfile(t *testing.T) {
	m, err := New(testProfile(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := m.Identity()
	if id.Vendor != 0x17cb || id.Device != 0x0306 || id.SubVendor != 0x17cb || id.SubDev != 0x010c {
		t.Errorf("IDs %04x:%04x sub %04x:%04x", id.Vendor, id.Device, id.SubVendor, id.SubDev)
	}
	if id.Class != pci.ClassWirelessOther || id.BARSize[0] != 4096 || id.MSIVectors != 5 {
		t.Errorf("class %#x BAR0 %d vectors %d", id.Class, id.BARSize[0], id.MSIVectors)
	}
	if _, err := New(testProfile(), Options{Functions: map[string]Function{"NOPE": &Loopback{}}}); err == nil {
		t.Error("a function for a pair the profile lacks was accepted")
	}
	// Every profile of the table can be emulated.
	for _, p := range mhi.Profiles() {
		if _, err := New(p, Options{}); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}

func TestRegisterFile(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	if v := h.r32(mhi.RegMHIVER); v != mhi.MHIVersion10 {
		t.Errorf("MHIVER %#x", v)
	}
	if h.r32(mhi.RegBHIOFF) != bhiOff || h.r32(mhi.RegBHIEOFF) != bhieOff || h.r32(mhi.RegCHDBOFF) != chdbOff || h.r32(mhi.RegERDBOFF) != erdbOff {
		t.Error("block offsets")
	}
	if v := h.r32(mhi.RegSOCHWVersion); v != defaultSOCHWVersion {
		t.Errorf("SOC_HW_VERSION %#x", v)
	}
	for _, off := range []uint64{0x04, 0x0C, 0x3C, 0x4C, 0x78, 0x90, 0x200} {
		h.w32(off, 0xdeadbeef)
		if v := h.r32(off); v != 0 {
			t.Errorf("unknown offset %#x reads %#x", off, v)
		}
	}
	// MHICFG: NER/NHWER are the host's, NHWCH/NCH are not.
	cfg := h.r32(mhi.RegMHICFG)
	if ner := mhi.Field(cfg, 0xFF<<16, 16); ner != 4 {
		t.Errorf("power-on NER %d", ner)
	}
	h.w32(mhi.RegMHICFG, 0x0305FFFF)
	if v := h.r32(mhi.RegMHICFG); v != 0x03050000|cfg&0xFFFF {
		t.Errorf("MHICFG after write %#x (was %#x)", v, cfg)
	}
	// Address registers are RW.
	h.w64(mhi.RegCCABAPLower, 0x1234_5678_9abc_def0)
	if h.r32(mhi.RegCCABAPLower) != 0x9abcdef0 || h.r32(mhi.RegCCABAPHigher) != 0x12345678 {
		t.Error("CCABAP does not read back")
	}
	// BHI: serial number, EE; read-only registers reject writes (and
	// say so in strict mode).
	bhi := uint64(bhiOff)
	if h.r32(bhi+mhi.BHISerialNum) == 0 || mhi.EE(h.r32(bhi+mhi.BHIExecEnv)) != mhi.EEAMSS {
		t.Error("BHI serial number / EE")
	}
	h.w32(mhi.RegMHISTATUS, 0)
	h.expectViolation("read-only register 0x48")
	if h.state() != mhi.StateReady {
		t.Error("MHISTATUS changed by a host write")
	}
	// A doorbell's high word alone commits nothing.
	h.w32(chdbOff+8*4+4, 0x1)
	if h.r32(chdbOff+8*4+4) != 1 {
		t.Error("doorbell high word does not read back")
	}
}

func TestPowerUpToMissionMode(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.bhi = uint64(h.r32(mhi.RegBHIOFF))
	if ee := h.ee(); ee != mhi.EEAMSS {
		t.Fatalf("EE %s", ee)
	}
	h.upToMissionMode()
	if s, ee := h.m.State(); s != mhi.StateM0 || ee != mhi.EEAMSS {
		t.Errorf("modem in %s/%s", s, ee)
	}
}

func TestLoopbackKeepsTDsByteExact(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	// The host starts UL first, then DL (§4.7).
	ul := h.startChannel(0)
	dl := h.startChannel(1)
	const n = 100 // > 3 wraps of the 32-element rings
	rng := rand.New(rand.NewPCG(1, 2))
	rx := h.alloc(4096, 8)
	for i := range n {
		size := 1 + rng.IntN(4000)
		tx := h.fill(size, byte(i))
		dlTRE := h.queue(dl, rx.IOVA, rx.Len(), mhi.TREIEOT)
		ulTRE := h.queue(ul, tx.IOVA, size, mhi.TREIEOT)
		ev := h.expectTx(0, 0, mhi.CodeEOT)
		if ev.Ptr != ulTRE || ev.Len() != size {
			t.Fatalf("UL EOT ptr %#x len %d, want %#x %d", ev.Ptr, ev.Len(), ulTRE, size)
		}
		ev = h.expectTx(0, 1, mhi.CodeEOT)
		if ev.Ptr != dlTRE || ev.Len() != size {
			t.Fatalf("DL EOT ptr %#x len %d, want %#x %d", ev.Ptr, ev.Len(), dlTRE, size)
		}
		if !same(rx.Mem[:size], tx.Mem[:size]) {
			t.Fatalf("packet %d corrupted", i)
		}
		h.dma.Free(tx)
	}
	st := h.m.Stats()
	if st.TDsUL != n || st.PacketsDL != n || st.BytesUL != st.BytesDL {
		t.Errorf("stats %+v", st)
	}
}

func TestChainedTDIsOneLoopbackPacketWithEOBEvents(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	ul := h.startChannel(0)
	dl := h.startChannel(1)
	a, b := h.fill(100, 1), h.fill(50, 9)
	rx := h.alloc(4096, 8)
	h.queue(dl, rx.IOVA, rx.Len(), mhi.TREIEOT)
	// Two TREs, one TD: the first asks for EOB, the last for EOT. The
	// host rings once for both.
	first := ul.wp
	h.writeTRE(ul, mhi.TRE(a.IOVA, 100, mhi.TREChain|mhi.TREIEOB))
	second := ul.wp
	h.writeTRE(ul, mhi.TRE(b.IOVA, 50, mhi.TREIEOT))
	h.publish(ul)
	if ev := h.expectTx(0, 0, mhi.CodeEOB); ev.Ptr != first || ev.Len() != 100 {
		t.Errorf("EOB ptr %#x len %d", ev.Ptr, ev.Len())
	}
	if ev := h.expectTx(0, 0, mhi.CodeEOT); ev.Ptr != second || ev.Len() != 50 {
		t.Errorf("EOT ptr %#x len %d", ev.Ptr, ev.Len())
	}
	if ev := h.expectTx(0, 1, mhi.CodeEOT); ev.Len() != 150 {
		t.Fatalf("looped TD has %d bytes, want 150", ev.Len())
	}
	if !same(rx.Mem[:100], a.Mem) || !same(rx.Mem[100:150], b.Mem) {
		t.Error("chained TD corrupted")
	}
}

func TestDLPacketLargerThanBufferIsSplitWithOverflow(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	ul := h.startChannel(0)
	dl := h.startChannel(1)
	const size, piece = 2500, 1000
	tx := h.fill(size, 3)
	var rx []*pci.Buffer
	var tres []uint64
	for range 3 {
		b := h.alloc(piece, 8)
		rx = append(rx, b)
		tres = append(tres, h.queue(dl, b.IOVA, piece, mhi.TREIEOT))
	}
	h.queue(ul, tx.IOVA, size, mhi.TREIEOT)
	h.expectTx(0, 0, mhi.CodeEOT)
	var got []byte
	for i, want := range []struct {
		code mhi.Code
		n    int
	}{{mhi.CodeOverflow, piece}, {mhi.CodeOverflow, piece}, {mhi.CodeEOT, size - 2*piece}} {
		ev := h.expectTx(0, 1, want.code)
		if ev.Ptr != tres[i] || ev.Len() != want.n {
			t.Fatalf("piece %d: ptr %#x len %d, want %#x %d", i, ev.Ptr, ev.Len(), tres[i], want.n)
		}
		got = append(got, rx[i].Mem[:want.n]...)
	}
	if !same(got, tx.Mem) {
		t.Error("split packet corrupted")
	}
}

func TestDLWaitsForBuffersThenDelivers(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	ul := h.startChannel(0)
	dl := h.startChannel(1)
	tx := h.fill(300, 5)
	h.queue(ul, tx.IOVA, 300, mhi.TREIEOT)
	h.expectTx(0, 0, mhi.CodeEOT)
	h.noEvent(0, 20*time.Millisecond) // no DL buffer yet: queued in the modem
	rx := h.alloc(1024, 8)
	h.queue(dl, rx.IOVA, 1024, mhi.TREIEOT)
	if ev := h.expectTx(0, 1, mhi.CodeEOT); ev.Len() != 300 || !same(rx.Mem[:300], tx.Mem) {
		t.Fatal("queued packet not delivered intact")
	}
}

func TestModeration(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	// DIAG completes on ring 1, INTMODT 50 ms (vector 2): the host sets
	// BEI on its TREs (§5.6).
	ul := h.startChannel(4)
	h.startChannel(5)
	tx := h.fill(64, 1)
	before := h.msis[2].Load()
	h.queue(ul, tx.IOVA, 64, mhi.TREIEOT|mhi.TREBEI)
	h.expectTx(1, 4, mhi.CodeEOT)
	seen := time.Now()
	if h.msis[2].Load() != before {
		t.Fatal("BEI event raised its MSI at once")
	}
	h.waitFor("moderated MSI", func() bool { return h.msis[2].Load() > before })
	if d := time.Since(seen); d < 25*time.Millisecond {
		t.Errorf("moderated MSI after %v, want about INTMODT (50 ms)", d)
	}
	// BEI = 0 on the same ring: immediate.
	before = h.msis[2].Load()
	h.queue(ul, tx.IOVA, 64, mhi.TREIEOT)
	h.expectTx(1, 4, mhi.CodeEOT)
	h.waitFor("immediate MSI", func() bool { return h.msis[2].Load() > before })
	if st := h.m.Stats(); st.MSIsModerated != 1 {
		t.Errorf("%d moderated events, want 1", st.MSIsModerated)
	}
}

func TestModerationWithoutINTMODTRaisesNothing(t *testing.T) {
	p := testProfile()
	p.EventRings[1].IntModMs = 0
	h := newHost(t, p, Options{})
	h.upToMissionMode()
	ul := h.startChannel(4)
	h.startChannel(5)
	tx := h.fill(64, 1)
	before := h.msis[2].Load()
	h.queue(ul, tx.IOVA, 64, mhi.TREIEOT|mhi.TREBEI)
	h.expectTx(1, 4, mhi.CodeEOT)
	time.Sleep(30 * time.Millisecond)
	if h.msis[2].Load() != before {
		t.Error("BEI event with INTMODT 0 raised an MSI")
	}
}

// burstLoopback starts IP_HW0 with a Loopback behind it.
func burstLoopback(t *testing.T, opts Options) (*rawHost, *hostChan, *hostChan) {
	opts.Functions = map[string]Function{"IP_HW0": &Loopback{}}
	h := newHost(t, testProfile(), opts)
	h.upToMissionMode()
	return h, h.startChannel(100), h.startChannel(101)
}

func TestBurstChannelPollsThenSendsDBModeWhenIdle(t *testing.T) {
	h, ul, dl := burstLoopback(t, Options{BurstIdle: 20 * time.Millisecond})
	rx := make([]*pci.Buffer, 4)
	for i := range rx {
		rx[i] = h.alloc(2048, 8)
		h.queue(dl, rx[i].IOVA, 2048, mhi.TREIEOT|mhi.TREBEI) // rings once, then only wp
	}
	tx := h.fill(1500, 7)
	// First TRE: doorbell (doorbell mode). Then context wp only: the
	// device must find them by polling (§5.3, pitfall 9).
	h.queue(ul, tx.IOVA, 1500, mhi.TREIEOT|mhi.TREBEI)
	h.expectTx(2, 100, mhi.CodeEOT)
	h.expectTx(3, 101, mhi.CodeEOT)
	if ul.dbMode {
		t.Fatal("host still in doorbell mode")
	}
	h.queue(ul, tx.IOVA, 1000, mhi.TREIEOT|mhi.TREBEI)
	h.expectTx(2, 100, mhi.CodeEOT)
	if ev := h.expectTx(3, 101, mhi.CodeEOT); ev.Len() != 1000 {
		t.Fatalf("looped %d bytes", ev.Len())
	}
	// Idle: DB_MODE for the UL channel, on its event ring.
	ev := h.expectTx(2, 100, mhi.CodeDBMode)
	if ev.Ptr != ul.wp {
		t.Errorf("DB_MODE ptr %#x, want the next TRE slot %#x", ev.Ptr, ul.wp)
	}
	ul.dbMode = true
	if h.m.Stats().DBModes != 1 {
		t.Errorf("stats %+v", h.m.Stats())
	}
	// Having sent DB_MODE, the device no longer polls: a TRE published
	// only in the context stays untouched until the doorbell.
	h.writeTRE(ul, mhi.TRE(tx.IOVA, 200, mhi.TREIEOT|mhi.TREBEI))
	h.chCtx.Store64(100*mhi.ContextSize+mhi.CtxWP, ul.wp)
	h.noEvent(2, 30*time.Millisecond)
	h.ring(ul)
	h.expectTx(2, 100, mhi.CodeEOT)
	if ev := h.expectTx(3, 101, mhi.CodeEOT); ev.Len() != 200 {
		t.Fatalf("looped %d bytes", ev.Len())
	}
}

// lostDoorbellMode brings IP_HW0's UL channel to doorbell mode (its
// DB_MODE posted) on a host that then loses its doorbell-mode flag, as
// Linux's host can (docs/KERNEL-CROSSCHECK.md): the host's next UL TRE is
// published in the channel context only, never rung.
func lostDoorbellMode(t *testing.T, watchdog time.Duration) (*rawHost, *hostChan, *hostChan, *pci.Buffer) {
	// A 50 ms poll window: the test must queue its next TRE inside it
	// after the watchdog restarts polling, also under -race on a loaded
	// machine (5 ms was missed there once in 20 runs).
	h, ul, dl := burstLoopback(t, Options{BurstIdle: 50 * time.Millisecond, DBModeWatchdog: watchdog})
	for range 4 {
		h.queue(dl, h.alloc(2048, 8).IOVA, 2048, mhi.TREIEOT) // rings once, then only wp
	}
	tx := h.fill(1500, 3)
	h.queue(ul, tx.IOVA, 1500, mhi.TREIEOT)
	h.expectTx(2, 100, mhi.CodeEOT)
	h.expectTx(3, 101, mhi.CodeEOT)
	h.expectTx(2, 100, mhi.CodeDBMode)
	// The host's DB_MODE handler set its flag, and the late clear of
	// a doorbell write that raced the DB_MODE cleared it again.
	ul.dbMode = false
	h.queue(ul, tx.IOVA, 700, mhi.TREIEOT)
	return h, ul, dl, tx
}

func TestBurstChannelInDoorbellModeWaitsForTheDoorbellWithoutTheWatchdog(t *testing.T) {
	h, ul, _, _ := lostDoorbellMode(t, -1)
	h.noEvent(2, 300*time.Millisecond)
	if n := h.m.Stats().WPWithoutDoorbell; n != 0 {
		t.Errorf("WPWithoutDoorbell %d with the watchdog off", n)
	}
	h.ring(ul)
	h.expectTx(2, 100, mhi.CodeEOT)
}

func TestDBModeWatchdogFindsULWPMovedWithoutDoorbell(t *testing.T) {
	h, ul, _, tx := lostDoorbellMode(t, 0) // default watchdog
	start := time.Now()
	h.expectTx(2, 100, mhi.CodeEOT)
	if ev := h.expectTx(3, 101, mhi.CodeEOT); ev.Len() != 700 {
		t.Fatalf("looped %d bytes, want 700", ev.Len())
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("TRE found after %v: the watchdog looked before 30 ms", d)
	}
	if n := h.m.Stats().WPWithoutDoorbell; n != 1 {
		t.Errorf("WPWithoutDoorbell %d, want 1", n)
	}
	// The channel polls again: the next TRE, also unrung, comes at once
	// (well before another watchdog period), then DB_MODE again.
	h.queue(ul, tx.IOVA, 300, mhi.TREIEOT)
	h.expectTx(2, 100, mhi.CodeEOT)
	if ev := h.expectTx(3, 101, mhi.CodeEOT); ev.Len() != 300 {
		t.Fatalf("looped %d bytes, want 300", ev.Len())
	}
	h.expectTx(2, 100, mhi.CodeDBMode)
	if n := h.m.Stats().WPWithoutDoorbell; n != 1 {
		t.Errorf("WPWithoutDoorbell %d after a polled TRE, want 1", n)
	}
}

// The watchdog takes a moved context wp for a lost doorbell only when the
// doorbell has not come on a second look a quarter period later: a host
// caught between its context wp write and its doorbell write is not
// counted. The looks are driven with synthetic times (the period is an
// hour, so the device goroutine never looks itself).
func TestDBModeWatchdogLooksTwiceBeforeItActs(t *testing.T) {
	look := func(h *rawHost, at func(watchAt time.Time) time.Time) {
		h.m.mu.Lock()
		c := h.m.chans[100]
		if c.watchAt.IsZero() {
			h.m.mu.Unlock()
			t.Fatal("UL channel in doorbell mode is not watched")
		}
		h.m.watchDBMode(c, at(c.watchAt))
		h.m.mu.Unlock()
		h.m.signal()
	}
	same := func(w time.Time) time.Time { return w }
	t.Run("doorbell-follows", func(t *testing.T) {
		h, ul, _, _ := lostDoorbellMode(t, time.Hour)
		look(h, same)
		h.noEvent(2, 20*time.Millisecond)
		h.ring(ul) // the doorbell the host was about to write
		h.expectTx(2, 100, mhi.CodeEOT)
		if n := h.m.Stats().WPWithoutDoorbell; n != 0 {
			t.Errorf("WPWithoutDoorbell %d for a doorbell that came, want 0", n)
		}
	})
	t.Run("no-doorbell", func(t *testing.T) {
		h, _, _, _ := lostDoorbellMode(t, time.Hour)
		look(h, same)
		h.noEvent(2, 20*time.Millisecond)
		look(h, same) // the confirming look, due a quarter period later
		h.expectTx(2, 100, mhi.CodeEOT)
		if n := h.m.Stats().WPWithoutDoorbell; n != 1 {
			t.Errorf("WPWithoutDoorbell %d, want 1", n)
		}
	})
}

func TestDBModeWatchdogFindsDLBuffersPublishedWithoutDoorbell(t *testing.T) {
	h, ul, dl := burstLoopback(t, Options{BurstIdle: 5 * time.Millisecond})
	h.queue(dl, h.alloc(2048, 8).IOVA, 2048, mhi.TREIEOT) // DL polls
	tx := h.fill(400, 9)
	h.queue(ul, tx.IOVA, 400, mhi.TREIEOT)
	h.expectTx(2, 100, mhi.CodeEOT)
	h.expectTx(3, 101, mhi.CodeEOT)
	// No DL buffer left: the next looped packet waits in the modem, the
	// DL channel gives up polling for buffers.
	h.queue(ul, tx.IOVA, 400, mhi.TREIEOT)
	h.expectTx(2, 100, mhi.CodeEOT)
	h.expectTx(3, 101, mhi.CodeDBMode)
	// The host loses its doorbell mode and publishes a buffer unrung.
	dl.dbMode = false
	rx := h.alloc(2048, 8)
	h.queue(dl, rx.IOVA, 2048, mhi.TREIEOT)
	if ev := h.expectTx(3, 101, mhi.CodeEOT); ev.Len() != 400 || !same(rx.Mem[:400], tx.Mem) {
		t.Fatalf("DL %d bytes, want the 400 looped intact", ev.Len())
	}
	if n := h.m.Stats().WPWithoutDoorbell; n != 1 {
		t.Errorf("WPWithoutDoorbell %d, want 1", n)
	}
}

func TestBurstDLFindsBuffersByPolling(t *testing.T) {
	h, ul, dl := burstLoopback(t, Options{BurstIdle: 50 * time.Millisecond})
	first := h.alloc(2048, 8)
	h.queue(dl, first.IOVA, 2048, mhi.TREIEOT) // doorbell: polling mode
	tx := h.fill(100, 1)
	for i := range 3 {
		h.queue(ul, tx.IOVA, 100, mhi.TREIEOT)
		h.expectTx(2, 100, mhi.CodeEOT)
		if i > 0 {
			// Out of DL buffers: publish one in the context only.
			b := h.alloc(2048, 8)
			h.queue(dl, b.IOVA, 2048, mhi.TREIEOT)
		}
		h.expectTx(3, 101, mhi.CodeEOT)
	}
}

func TestSuspendAndResume(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	ul := h.startChannel(0)
	dl := h.startChannel(1)
	h.setState(mhi.StateM3)
	h.expectState(mhi.StateM3)
	if h.state() != mhi.StateM3 || h.chState(0) != mhi.ChanSuspended || h.chState(1) != mhi.ChanSuspended {
		t.Fatalf("state %s, channels %s/%s", h.state(), h.chState(0), h.chState(1))
	}
	// TREs queued in M3 reach memory only; M0 re-rings (§2.1).
	tx, rx := h.fill(10, 1), h.alloc(64, 8)
	h.writeTRE(dl, mhi.TRE(rx.IOVA, 64, mhi.TREIEOT))
	h.writeTRE(ul, mhi.TRE(tx.IOVA, 10, mhi.TREIEOT))
	h.setState(mhi.StateM0)
	h.expectState(mhi.StateM0)
	if h.chState(0) != mhi.ChanRunning || h.chState(1) != mhi.ChanRunning {
		t.Fatal("channels not RUNNING after M0")
	}
	h.publish(dl)
	h.publish(ul)
	h.expectTx(0, 0, mhi.CodeEOT)
	h.expectTx(0, 1, mhi.CodeEOT)
}

func TestM1M2AndWakeDoorbell(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	if err := h.m.EnterM1(); !errors.Is(err, ErrState) {
		t.Errorf("EnterM1 in READY: %v", err)
	}
	h.upToMissionMode()
	if err := h.m.EnterM1(); err != nil {
		t.Fatal(err)
	}
	h.expectState(mhi.StateM1)
	h.setState(mhi.StateM2)
	h.waitFor("M2", func() bool { return h.state() == mhi.StateM2 })
	h.w64(h.chdb+8*mhi.WakeDoorbellChannel, 1)
	h.expectState(mhi.StateM0)
	if h.state() != mhi.StateM0 {
		t.Error("not M0 after wake")
	}
	h.w64(h.chdb+8*mhi.WakeDoorbellChannel, 0)
}

func TestChannelStopRestartReset(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	ul := h.startChannel(0)
	dl := h.startChannel(1)
	if code := h.command(mhi.TypeStopCmd, 0); code != mhi.CodeSuccess || h.chState(0) != mhi.ChanStop {
		t.Fatalf("STOP: %s, CHSTATE %s", code, h.chState(0))
	}
	// Restart after STOP keeps the ring and works.
	if code := h.command(mhi.TypeStartCmd, 0); code != mhi.CodeSuccess || h.chState(0) != mhi.ChanRunning {
		t.Fatalf("restart: %s, CHSTATE %s", code, h.chState(0))
	}
	tx, rx := h.fill(10, 1), h.alloc(64, 8)
	h.queue(dl, rx.IOVA, 64, mhi.TREIEOT)
	h.queue(ul, tx.IOVA, 10, mhi.TREIEOT)
	h.expectTx(0, 0, mhi.CodeEOT)
	h.expectTx(0, 1, mhi.CodeEOT)
	// RESET: DISABLED, and no TX event afterwards even with DL data.
	h.queue(dl, rx.IOVA, 64, mhi.TREIEOT)
	for _, ch := range []int{0, 1} {
		if code := h.command(mhi.TypeResetCmd, ch); code != mhi.CodeSuccess || h.chState(ch) != mhi.ChanDisabled {
			t.Fatalf("RESET %d: %s, CHSTATE %s", ch, code, h.chState(ch))
		}
	}
	h.noEvent(0, 10*time.Millisecond)
	// Fresh start after RESET.
	ul = h.startChannel(0)
	dl = h.startChannel(1)
	h.queue(dl, rx.IOVA, 64, mhi.TREIEOT)
	h.queue(ul, tx.IOVA, 10, mhi.TREIEOT)
	h.expectTx(0, 0, mhi.CodeEOT)
	h.expectTx(0, 1, mhi.CodeEOT)
}

func TestSysErrThenResetComesBackReady(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	h.startChannel(0)
	h.startChannel(1)
	before := h.msis[0].Load()
	if err := h.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	st := h.r32(mhi.RegMHISTATUS)
	if mhi.State(st>>8) != mhi.StateSysErr || st&mhi.StatusSysErr == 0 {
		t.Fatalf("MHISTATUS %#x", st)
	}
	h.expectState(mhi.StateSysErr)
	h.waitFor("INTVEC MSI", func() bool { return h.msis[0].Load() > before })
	// Anything but RESET is refused in SYS_ERR.
	h.setState(mhi.StateM3)
	h.expectViolation("requested in SYS_ERR")
	// Recovery (§4.8): RESET, wait for it to clear (woken by INTVEC),
	// rewrite INTVEC, READY, reprogram, M0.
	before = h.msis[0].Load()
	h.w32(mhi.RegMHICTRL, h.r32(mhi.RegMHICTRL)|mhi.CtrlReset)
	h.waitFor("INTVEC MSI after reset", func() bool { return h.msis[0].Load() > before })
	h.w32(h.bhi+mhi.BHIIntVec, 0)
	h.waitReady()
	h.programMMIO()
	h.toMissionMode()
	// The channels were forgotten: start them again and loop data.
	ul := h.startChannel(0)
	dl := h.startChannel(1)
	tx, rx := h.fill(10, 1), h.alloc(64, 8)
	h.queue(dl, rx.IOVA, 64, mhi.TREIEOT)
	h.queue(ul, tx.IOVA, 10, mhi.TREIEOT)
	h.expectTx(0, 0, mhi.CodeEOT)
	h.expectTx(0, 1, mhi.CodeEOT)
}

func TestSysErrCanLoseFirmware(t *testing.T) {
	h := newHost(t, testProfile(), Options{LoseFirmwareOnSysErr: true})
	h.upToMissionMode()
	h.m.TriggerSysErr()
	h.expectState(mhi.StateSysErr)
	h.w32(mhi.RegMHICTRL, h.r32(mhi.RegMHICTRL)|mhi.CtrlReset)
	h.waitFor("RESET clear", func() bool { return h.r32(mhi.RegMHICTRL)&mhi.CtrlReset == 0 })
	if h.ee() != mhi.EEPBL || h.r32(mhi.RegMHISTATUS)&mhi.StatusReady != 0 {
		t.Errorf("EE %s, MHISTATUS %#x: want PBL, not READY", h.ee(), h.r32(mhi.RegMHISTATUS))
	}
}

func TestIllegalStateRequestIsSysErr(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	h.setState(mhi.StateM2) // M2 only from M1
	h.expectViolation("requests M2 while the device is in M0")
	h.expectState(mhi.StateSysErr)
}

func TestSoCResetReturnsToPowerOn(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	h.startChannel(0)
	// The reset takes config space along, like hardware: the Command
	// register loses memory decoding and MSI is disabled, so the host
	// restores both (what Linux pci_restore_state does).
	var msi [pci.MSIPending - pci.MSICtrl]byte
	msiCtrl := pci.MSICapOffset + pci.MSICtrl
	if err := h.dev.ConfigRead(msiCtrl, msi[:]); err != nil {
		t.Fatal(err)
	}
	h.w32(mhi.RegSOCResetReq, mhi.SOCResetCookie)
	h.waitFor("config space reset", func() bool {
		var b [2]byte
		if err := h.dev.ConfigRead(pci.CfgCommand, b[:]); err != nil {
			t.Fatal(err)
		}
		return b[0]&pci.CmdMemory == 0
	})
	if err := h.dev.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < len(msi); i += 2 {
		if err := h.dev.ConfigWrite(msiCtrl+i, msi[i:i+2]); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.dev.ConfigWrite(msiCtrl, msi[:2]); err != nil {
		t.Fatal(err)
	}
	h.waitFor("READY after SoC reset", func() bool { return h.state() == mhi.StateReady })
	if h.r32(mhi.RegCCABAPLower) != 0 {
		t.Error("context base survived a SoC reset")
	}
	h.powerUp()
	h.toMissionMode()
}

// pblBoot brings a PBL modem through a BHI download of img.
func pblBoot(h *rawHost, img []byte) *pci.Buffer {
	h.bhi = uint64(h.r32(mhi.RegBHIOFF))
	h.w32(h.bhi+mhi.BHIIntVec, 0)
	buf := h.alloc(len(img), 4096)
	copy(buf.Mem, img)
	h.w32(h.bhi+mhi.BHIStatus, 0)
	h.w64(h.bhi+mhi.BHIImgAddrLow, buf.IOVA)
	h.w32(h.bhi+mhi.BHIImgSize, uint32(len(img)))
	h.w32(h.bhi+mhi.BHIImgTxDB, 0x1234)
	h.waitFor("BHI status", func() bool { return h.r32(h.bhi+mhi.BHIStatus)>>30 != 0 })
	return buf
}

func TestPBLDownloadThenSBLThenAMSS(t *testing.T) {
	h := newHost(t, testProfile(), Options{Boot: BootPBL})
	pblToSBL(t, h)
	// SBLTime later the modem reaches AMSS by itself, EXECENV first.
	h.expectEE(mhi.EEAMSS)
	if h.ee() != mhi.EEAMSS {
		t.Error("BHI_EXECENV not AMSS at EE_EVENT(AMSS)")
	}
}

// SBL channels run in the SBL (the modem stays there until LeaveSBL, so
// that a slow host's START_CHAN cannot land after the SBL has ended),
// then end with it at AMSS.
func TestSBLChannelStartsInTheSBL(t *testing.T) {
	h := newHost(t, testProfile(), Options{Boot: BootPBL, StayInSBL: true})
	pblToSBL(t, h)
	h.startChannel(2)
	if err := h.m.LeaveSBL(); err != nil {
		t.Fatal(err)
	}
	h.expectEE(mhi.EEAMSS)
	if h.ee() != mhi.EEAMSS {
		t.Error("BHI_EXECENV not AMSS at EE_EVENT(AMSS)")
	}
}

// pblToSBL downloads an image over BHI to a modem in PBL and brings the
// SBL it starts to M0 (EE_EVENT(SBL) consumed).
func pblToSBL(t *testing.T, h *rawHost) {
	t.Helper()
	h.bhi = uint64(h.r32(mhi.RegBHIOFF))
	if h.ee() != mhi.EEPBL || h.r32(mhi.RegMHISTATUS) != 0 {
		t.Fatalf("EE %s MHISTATUS %#x", h.ee(), h.r32(mhi.RegMHISTATUS))
	}
	img := make([]byte, 100_000)
	for i := range img {
		img[i] = byte(i * 13)
	}
	before := h.msis[0].Load()
	pblBoot(h, img)
	if s := h.r32(h.bhi+mhi.BHIStatus) >> 30; s != mhi.BHIStatusSuccess {
		t.Fatalf("BHI status %d, errcode %#x", s, h.r32(h.bhi+mhi.BHIErrCode))
	}
	h.waitFor("INTVEC MSI", func() bool { return h.msis[0].Load() > before })
	if got := h.m.BHIImage(); got.Size != len(img) || got.SHA256 != sha256.Sum256(img) || got.Session != 0x1234 {
		t.Errorf("image %d bytes session %#x", got.Size, got.Session)
	}
	h.waitReady()
	if h.ee() != mhi.EESBL {
		t.Fatalf("EE %s after download", h.ee())
	}
	h.programMMIO()
	h.setState(mhi.StateM0)
	h.expectState(mhi.StateM0)
	h.expectEE(mhi.EESBL)
}

func TestBHIErrors(t *testing.T) {
	h := newHost(t, testProfile(), Options{Boot: BootPBL, ImageMinSize: 1000})
	check := func(img []byte, want uint32) {
		t.Helper()
		pblBoot(h, img)
		if s := h.r32(h.bhi+mhi.BHIStatus) >> 30; s != mhi.BHIStatusError {
			t.Fatalf("BHI status %d, want error", s)
		}
		if code := h.r32(h.bhi + mhi.BHIErrCode); code != want {
			t.Errorf("errcode %#x, want %#x", code, want)
		}
		if h.ee() != mhi.EEPBL || h.r32(mhi.RegMHISTATUS)&mhi.StatusReady != 0 {
			t.Error("left PBL after a failed download")
		}
	}
	check(make([]byte, 999), BHIErrImageSize)
	h.m.FailNextBHI(0x77)
	check(make([]byte, 4096), 0x77)
	// An image the host never mapped is refused (and named).
	h.w64(h.bhi+mhi.BHIImgAddrLow, 0x7000_0000)
	h.w32(h.bhi+mhi.BHIImgSize, 4096)
	h.w32(h.bhi+mhi.BHIStatus, 0)
	h.w32(h.bhi+mhi.BHIImgTxDB, 0x99)
	h.waitFor("BHI status", func() bool { return h.r32(h.bhi+mhi.BHIStatus)>>30 != 0 })
	h.expectViolation("reading the BHI image")
	if code := h.r32(h.bhi + mhi.BHIErrCode); code != BHIErrDMA {
		t.Errorf("errcode %#x", code)
	}
	// And a good one still boots.
	pblBoot(h, make([]byte, 4096))
	h.waitReady()
}

func TestStrictViolations(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	ul := h.startChannel(0)

	// A doorbell outside the ring.
	h.w64(h.chdb+8*0, ul.ring.IOVA+uint64(ul.ring.Len())+0x100)
	h.expectViolation("doorbell for channel 0 at")

	// START of a channel whose context is not ENABLED: the context is
	// DISABLED and empty, so the start fails too.
	if code := h.command(mhi.TypeStartCmd, 4); code != mhi.CodeUndefErr {
		t.Errorf("START of an uninitialised channel: %s", code)
	}
	h.expectViolation("CHSTATE is DISABLED, want ENABLED")
	h.expectViolation("chtype 0")
	h.expectViolation("zero-length ring")

	// A channel the profile does not define: dropped, no completion.
	h.sendCommand(mhi.TypeStartCmd, 60)
	h.expectViolation("channel 60")
	h.noEvent(0, 10*time.Millisecond)

	// An unknown command type.
	h.sendCommand(0x42, 0)
	h.expectViolation("type 0x42")
	if el := h.nextEvent(0); el.Code() != mhi.CodeUndefErr {
		t.Errorf("unknown command completed with %s", el.Code())
	}

	// STOP of a channel that never started: no completion.
	h.sendCommand(mhi.TypeStopCmd, 5)
	h.expectViolation("STOP_CHAN for channel 5")
	h.noEvent(0, 10*time.Millisecond)

	// A channel started outside its EE (SAHARA is SBL-only).
	h.initChannel(2)
	if code := h.command(mhi.TypeStartCmd, 2); code != mhi.CodeUndefErr {
		t.Errorf("START of an SBL channel in AMSS: %s", code)
	}
	h.expectViolation("in EE AMSS")

	// A TRE pointing at unmapped memory.
	dl := h.startChannel(1)
	_ = dl
	h.queue(ul, 0x7000_0000, 64, mhi.TREIEOT)
	h.expectViolation("reading a UL buffer")
	h.expectTx(0, 0, mhi.CodeBadTRE)

	if st := h.m.Stats(); st.Violations < 7 || len(h.m.Violations()) < 7 {
		t.Errorf("%d violations counted", st.Violations)
	}
}

func TestEventRingFullWaitsForHost(t *testing.T) {
	p := testProfile()
	p.EventRings[0].Elements = 8 // 6 events fit before the host recycles
	h := newHost(t, p, Options{Functions: map[string]Function{"LOOPBACK": nil}})
	h.upToMissionMode()
	ul := h.startChannel(0)
	tx := h.fill(8, 1)
	var tres []uint64
	for range 20 {
		tres = append(tres, h.queue(ul, tx.IOVA, 8, mhi.TREIEOT))
	}
	time.Sleep(20 * time.Millisecond) // the device fills the ring and waits
	if h.m.Stats().EventRingFull == 0 {
		t.Error("the device never found the event ring full")
	}
	// Nothing was overwritten: every completion arrives, in order.
	for i := range 20 {
		if ev := h.expectTx(0, 0, mhi.CodeEOT); ev.Ptr != tres[i] {
			t.Fatalf("event %d names %#x, want %#x", i, ev.Ptr, tres[i])
		}
	}
	// The last TD is counted once the walker returns, just after its event.
	h.waitFor("20 TDs sunk", func() bool { return h.m.Stats().ULDrops == 20 })
	if st := h.m.Stats(); st.EventDrops != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestLoopbackHoldsULUntilDLBuffersCome(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	ul := h.startChannel(0)
	dl := h.startChannel(1)
	var tx []*pci.Buffer
	for i := range 5 {
		tx = append(tx, h.fill(100+i, byte(i)))
		h.queue(ul, tx[i].IOVA, 100+i, mhi.TREIEOT)
	}
	// The first TD is consumed and queued for DL; the others wait in
	// the host's ring rather than being dropped.
	h.expectTx(0, 0, mhi.CodeEOT)
	h.noEvent(0, 20*time.Millisecond)
	rx := make([]*pci.Buffer, 5)
	for i := range rx {
		rx[i] = h.alloc(256, 8)
		h.queue(dl, rx[i].IOVA, 256, mhi.TREIEOT)
	}
	got := 0
	for got < 5 {
		ev := h.nextEvent(0)
		if ev.Chan() == 1 {
			if ev.Len() != 100+got || !same(rx[got].Mem[:ev.Len()], tx[got].Mem) {
				t.Fatalf("packet %d: %d bytes", got, ev.Len())
			}
			got++
		}
	}
	if st := h.m.Stats(); st.DLDrops != 0 {
		t.Errorf("%d DL drops", st.DLDrops)
	}
}

func TestFunctionsSeeStartReceiveStop(t *testing.T) {
	f := &recorder{}
	h := newHost(t, testProfile(), Options{Functions: map[string]Function{"DIAG": f}})
	h.upToMissionMode()
	ul := h.startChannel(4)
	if f.starts.Load() != 0 {
		t.Fatal("function started with only UL running")
	}
	h.startChannel(5)
	h.waitFor("Start", func() bool { return f.starts.Load() == 1 })
	tx := h.fill(33, 1)
	h.queue(ul, tx.IOVA, 33, mhi.TREIEOT)
	h.expectTx(1, 4, mhi.CodeEOT)
	h.waitFor("Receive", func() bool { return f.bytes.Load() == 33 })
	h.command(mhi.TypeResetCmd, 4)
	h.waitFor("Stop", func() bool { return f.stops.Load() == 1 })
	if err := f.port.Load().Send([]byte("late")); !errors.Is(err, ErrStopped) {
		t.Errorf("Send after Stop: %v", err)
	}
}

type recorder struct {
	starts, stops, bytes atomic.Uint64
	port                 atomic.Pointer[Port]
}

func (r *recorder) Start(p *Port)     { r.starts.Add(1); r.port.Store(p) }
func (r *recorder) Receive(td []byte) { r.bytes.Add(uint64(len(td))) }
func (r *recorder) Stop()             { r.stops.Add(1) }

func TestEveryProfilePowersUpFromAMSSAndPBL(t *testing.T) {
	for _, p := range mhi.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			h := newHost(t, p, Options{})
			h.upToMissionMode()
			h = newHost(t, p, Options{Boot: BootPBL})
			pblBoot(h, make([]byte, 4096))
			h.waitReady()
			h.programMMIO()
			h.setState(mhi.StateM0)
			h.expectState(mhi.StateM0)
			h.expectEE(mhi.EESBL)
			h.expectEE(mhi.EEAMSS)
		})
	}
}

func TestFunctionLevelResetReturnsToBoot(t *testing.T) {
	h := newHost(t, testProfile(), Options{Boot: BootPBL})
	pblBoot(h, make([]byte, 64))
	h.waitReady()
	if err := h.dev.Reset(); err != nil {
		t.Fatal(err)
	}
	// Config space is back at power-on: the host enables decoding again.
	h.dev.SetBusMaster(true)
	if h.ee() != mhi.EEPBL || h.r32(mhi.RegMHISTATUS) != 0 || h.r32(h.bhi+mhi.BHIStatus) != 0 {
		t.Errorf("after FLR: EE %s MHISTATUS %#x BHI status %#x", h.ee(), h.r32(mhi.RegMHISTATUS), h.r32(h.bhi+mhi.BHIStatus))
	}
}

func TestBHIeVectorTableDownload(t *testing.T) {
	h := newHost(t, testProfile(), Options{Boot: BootPBL, SBLTime: time.Hour})
	pblBoot(h, make([]byte, 64))
	h.waitReady()
	segs := [][]byte{make([]byte, 1000), make([]byte, 333)}
	table := h.alloc(16*len(segs), 16)
	var img []byte
	for i, s := range segs {
		for j := range s {
			s[j] = byte(i + j)
		}
		b := h.alloc(len(s), 8)
		copy(b.Mem, s)
		img = append(img, s...)
		le := binary.LittleEndian
		le.PutUint64(table.Mem[16*i:], b.IOVA)
		le.PutUint64(table.Mem[16*i+8:], uint64(len(s)))
	}
	bhie := uint64(h.r32(mhi.RegBHIEOFF))
	h.w64(bhie+mhi.BHIETxVecAddrLow, table.IOVA)
	h.w32(bhie+mhi.BHIETxVecSize, uint32(table.Len()))
	h.w32(bhie+mhi.BHIETxVecDB, 0x2345)
	h.waitFor("TXVECSTATUS", func() bool { return h.r32(bhie+mhi.BHIETxVecStatus)>>30 != 0 })
	if v := h.r32(bhie + mhi.BHIETxVecStatus); v != mhi.BHIEStatusXferDone<<30|0x2345 {
		t.Fatalf("TXVECSTATUS %#x", v)
	}
	if got := h.m.BHIeImage(); got.SHA256 != sha256.Sum256(img) {
		t.Error("BHIe image differs")
	}
}

func TestSetSlowDelaysTheDevice(t *testing.T) {
	h := newHost(t, testProfile(), Options{})
	h.upToMissionMode()
	ul := h.startChannel(0)
	h.startChannel(1)
	h.m.SetSlow(20 * time.Millisecond)
	tx := h.fill(10, 1)
	start := time.Now()
	h.queue(ul, tx.IOVA, 10, mhi.TREIEOT)
	h.expectTx(0, 0, mhi.CodeEOT)
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("slow device answered in %v", d)
	}
	h.m.SetSlow(0)
}

// generator sends from its own goroutine, as a traffic source would.
type generator struct {
	n    int
	errs chan error
	stop chan struct{}
	done chan struct{}
}

func (g *generator) Start(p *Port) {
	g.stop, g.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(g.done)
		for i := range g.n {
			err := p.Send([]byte{byte(i), 1, 2, 3})
			select {
			case g.errs <- err:
			case <-g.stop:
				return
			}
		}
	}()
}
func (g *generator) Receive([]byte) {}
func (g *generator) Stop()          { close(g.stop); <-g.done }

func TestSendBackpressureFromAFunctionGoroutine(t *testing.T) {
	g := &generator{n: 6, errs: make(chan error, 6)}
	h := newHost(t, testProfile(), Options{
		Functions: map[string]Function{"DIAG": g},
		DLQueue:   4, SendTimeout: 10 * time.Millisecond,
	})
	h.upToMissionMode()
	h.startChannel(4)
	dl := h.startChannel(5)
	var ok, dropped int
	for range 6 {
		switch err := <-g.errs; {
		case err == nil:
			ok++
		case errors.Is(err, ErrNoBuffer):
			dropped++
		default:
			t.Fatal(err)
		}
	}
	if ok != 4 || dropped != 2 || h.m.Stats().DLDrops != 2 {
		t.Fatalf("%d queued, %d dropped (stats %+v)", ok, dropped, h.m.Stats())
	}
	// Buffers arrive: the queued packets come out in order.
	for i := range 4 {
		rx := h.alloc(64, 8)
		h.queue(dl, rx.IOVA, 64, mhi.TREIEOT|mhi.TREBEI)
		if ev := h.expectTx(1, 5, mhi.CodeEOT); ev.Len() != 4 || rx.Mem[0] != byte(i) {
			t.Fatalf("packet %d: len %d first byte %d", i, ev.Len(), rx.Mem[0])
		}
	}
}

// blockingReceiver holds the device goroutine inside Receive until
// released, while its own goroutine sends: what the carrier network's DL
// sender does while the host's UL transfers are being delivered.
type blockingReceiver struct {
	port     atomic.Pointer[Port]
	inside   chan struct{} // closed when Receive is entered
	release  chan struct{}
	fromRecv chan error // Send's result from inside Receive
}

func (b *blockingReceiver) Start(p *Port) { b.port.Store(p) }
func (b *blockingReceiver) Stop()         { b.port.Store(nil) }
func (b *blockingReceiver) Receive([]byte) {
	close(b.inside)
	<-b.release
	// The queue is still full: from the device goroutine Send must not
	// wait (nothing would drain the queue), so it drops.
	b.fromRecv <- b.port.Load().Send([]byte{0xEE})
}

func TestSendFromAnotherGoroutineWaitsWhileTheDeviceIsInsideReceive(t *testing.T) {
	b := &blockingReceiver{inside: make(chan struct{}), release: make(chan struct{}), fromRecv: make(chan error, 1)}
	h := newHost(t, testProfile(), Options{
		Functions: map[string]Function{"DIAG": b},
		DLQueue:   4, SendTimeout: time.Minute,
	})
	h.upToMissionMode()
	ul := h.startChannel(4)
	dl := h.startChannel(5)
	tx := h.fill(8, 1)
	h.queue(ul, tx.IOVA, 8, mhi.TREIEOT)
	<-b.inside
	var once sync.Once
	release := func() { once.Do(func() { close(b.release) }) }
	defer release() // a failed test must not leave the device goroutine stuck
	p := b.port.Load()
	errs := make(chan error, 6)
	go func() {
		for i := range 6 {
			errs <- p.Send([]byte{byte(i), 1, 2, 3})
		}
	}()
	for i := range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	// The fifth Send finds the queue full while the device goroutine is
	// inside Receive: it must wait for room, not drop.
	h.waitFor("the fifth Send to wait for room", func() bool {
		select {
		case err := <-errs:
			t.Fatalf("fifth send returned %v while it should wait", err)
		default:
		}
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		return h.m.chans[5].waiters > 0
	})
	// Room can only come once the device goroutine is back: the drop
	// from inside Receive happens with the queue still full.
	release()
	if err := <-b.fromRecv; !errors.Is(err, ErrNoBuffer) {
		t.Fatalf("Send from inside Receive with a full queue: %v, want ErrNoBuffer at once", err)
	}
	h.expectTx(1, 4, mhi.CodeEOT)
	for i := range 6 {
		rx := h.alloc(64, 8)
		h.queue(dl, rx.IOVA, 64, mhi.TREIEOT|mhi.TREBEI)
		if ev := h.expectTx(1, 5, mhi.CodeEOT); ev.Len() != 4 || rx.Mem[0] != byte(i) {
			t.Fatalf("packet %d: len %d first byte %d", i, ev.Len(), rx.Mem[0])
		}
	}
	for i := 4; i < 6; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if d := h.m.Stats().DLDrops; d != 1 {
		t.Fatalf("DLDrops %d, want 1 (the Send from inside Receive)", d)
	}
}

// echoNow answers every UL transfer from inside Receive, on the device
// goroutine, like the carrier network's ICMP responder: it does not hold
// UL for DL (no EchoFunction), and counts the Sends that failed.
type echoNow struct {
	port   atomic.Pointer[Port]
	failed atomic.Uint64
}

func (e *echoNow) Start(p *Port) { e.port.Store(p) }
func (e *echoNow) Receive(td []byte) {
	if p := e.port.Load(); p == nil || p.Send(td) != nil {
		e.failed.Add(1)
	}
}
func (e *echoNow) Stop() { e.port.Store(nil) }

// TestRepliesFromReceiveSpanningBuffersWaitForALateHost: replies larger
// than the host's DL buffers, produced inside Receive while the host has
// posted one buffer and then posts one at a time, late (as mhi_net's
// refill does on a starved guest), are queued, not dropped: the first
// reply's rest comes first, then the second reply, each whole
// (OVERFLOW pieces ending in EOT).
func TestRepliesFromReceiveSpanningBuffersWaitForALateHost(t *testing.T) {
	e := &echoNow{}
	h := newHost(t, testProfile(), Options{Functions: map[string]Function{"DIAG": e}})
	h.upToMissionMode()
	ul := h.startChannel(4)
	dl := h.startChannel(5)
	const size, piece = 1500, 1000
	first := h.alloc(piece, 8)
	h.queue(dl, first.IOVA, piece, mhi.TREIEOT)
	req1, req2 := h.fill(size, 1), h.fill(size, 2)
	h.queue(ul, req1.IOVA, size, mhi.TREIEOT)
	h.expectTx(1, 4, mhi.CodeEOT)
	if ev := h.expectTx(1, 5, mhi.CodeOverflow); ev.Len() != piece {
		t.Fatalf("first piece: %d bytes", ev.Len())
	}
	h.queue(ul, req2.IOVA, size, mhi.TREIEOT)
	h.expectTx(1, 4, mhi.CodeEOT)
	h.noEvent(1, 20*time.Millisecond) // no buffer: both replies wait in the modem
	got := append([]byte(nil), first.Mem...)
	for i, want := range []struct {
		code mhi.Code
		n    int
	}{{mhi.CodeEOT, size - piece}, {mhi.CodeOverflow, piece}, {mhi.CodeEOT, size - piece}} {
		b := h.alloc(piece, 8)
		h.queue(dl, b.IOVA, piece, mhi.TREIEOT)
		if ev := h.expectTx(1, 5, want.code); ev.Len() != want.n {
			t.Fatalf("buffer %d: %v with %d bytes, want %v with %d", i+2, ev.Code(), ev.Len(), want.code, want.n)
		}
		got = append(got, b.Mem[:want.n]...)
	}
	if !same(got[:size], req1.Mem) || !same(got[size:], req2.Mem) {
		t.Error("a reply arrived corrupted")
	}
	if n, st := e.failed.Load(), h.m.Stats(); n != 0 || st.DLDrops != 0 {
		t.Errorf("%d failed Sends, %d DL drops", n, st.DLDrops)
	}
}
