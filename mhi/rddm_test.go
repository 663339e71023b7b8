package mhi_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// The firmware crashes into RDDM: the host collects the RAM dump over BHIe
// before it resets the modem, delivers it byte-exact (OnCrashDump,
// LastCrashDump, EventCrashDump), then recovers and data flows again.
func TestCrashDumpCollectedOverBHIeThenRecovered(t *testing.T) {
	p, r, dumps := crashDumpRig(t, 96<<10)
	l := newLoop(r, "LOOPBACK", 2048, 16, 16)
	rng := rand.New(rand.NewPCG(5, 6))
	l.exchange(t, rng, 10, 5000)
	img := bootImage(70000) // four full segments and a partial one
	if err := r.m.TriggerCrash(img); err != nil {
		t.Fatal(err)
	}
	var d mhi.CrashDump
	select {
	case d = <-dumps:
	case <-time.After(10 * time.Second):
		t.Fatal("no crash dump delivered")
	}
	if len(d.Data) != p.RDDMSize {
		t.Fatalf("dump of %d bytes, want the RDDM size %d", len(d.Data), p.RDDMSize)
	}
	if i := firstDiff(d.Data[:len(img)], img); i < len(img) {
		t.Fatalf("dump differs from the modem's image at byte %d", i)
	}
	if !bytes.Equal(d.Data[len(img):], make([]byte, p.RDDMSize-len(img))) {
		t.Errorf("dump has bytes past the image the modem did not write")
	}
	if d.Device != r.c.String() || d.Time.IsZero() {
		t.Errorf("dump names device %q at %v, want %q and a time", d.Device, d.Time, r.c.String())
	}
	if e := r.waitEvent(mhi.EventCrashDump, 5*time.Second); e.Err != nil {
		t.Errorf("crash-dump event error: %v", e.Err)
	}
	if e := r.waitOutcome(10 * time.Second); e.Kind != mhi.EventRecovered {
		t.Fatalf("recovery after the dump ended with %s: %v", e.Kind, e.Err)
	}
	l.exchange(t, rng, 10, 5000)
	last, ok := r.c.LastCrashDump()
	if !ok || !bytes.Equal(last.Data, d.Data) {
		t.Errorf("LastCrashDump = %v, %d bytes; want the delivered dump", ok, len(last.Data))
	}
	if s := r.c.Stats(); s.CrashDumps != 1 || s.Recoveries != 1 {
		t.Errorf("stats: %d crash dumps, %d recoveries; want 1 and 1", s.CrashDumps, s.Recoveries)
	}
	if n := r.m.RDDMUploads(); n != 1 {
		t.Errorf("modem uploaded %d dumps, want 1", n)
	}
}

// A modem found crashed in RDDM at power-up (nobody collected its dump) is
// dumped, reset and brought up.
func TestCrashDumpCollectedAtPowerUp(t *testing.T) {
	r, img := powerUpCrashed(t, nil)
	d, ok := r.c.LastCrashDump()
	if !ok || !bytes.Equal(d.Data[:len(img)], img) {
		t.Fatalf("LastCrashDump = %v, want the modem's image", ok)
	}
}

// powerUpCrashed crashes a modem into RDDM with a 5000-byte image, then
// powers it up through wrap (newRigWrap).
func powerUpCrashed(t *testing.T, wrap func(*vpci.Device) pci.Device) (*rig, []byte) {
	t.Helper()
	p := *profile(t, "foxconn-sdx55")
	p.RDDMSize = 8 << 10
	r := newRigWrap(t, &p, sim.Options{}, mhi.Options{}, wrap)
	img := bootImage(5000)
	if err := r.m.TriggerCrash(img); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.PowerUp(ctx); err != nil {
		t.Fatalf("PowerUp of a modem in RDDM: %v", err)
	}
	return r, img
}

// staleBAR is the BAR 0 of a backend (through bar0Device) that holds
// back the host's RXVECDB ring until the host first polls RXVECSTATUS, and
// answers that poll with a completed status of another transfer (another
// non-zero sequence): an earlier upload whose status lands after the host
// rang.
type staleBAR struct {
	pci.BAR

	mu     sync.Mutex
	bhie   uint64 // BHIEOFF, once the BAR decodes
	held   uint32 // the RXVECDB value held back, 0 when none
	served bool   // the stale status was answered
}

// bhieOff reads BHIEOFF until the BAR decodes. The caller holds b.mu.
func (b *staleBAR) bhieOff() uint64 {
	if b.bhie == 0 {
		if v := b.BAR.Read32(mhi.RegBHIEOFF); v != 0xFFFFFFFF {
			b.bhie = uint64(v)
		}
	}
	return b.bhie
}

func (b *staleBAR) Write32(off uint64, v uint32) {
	b.mu.Lock()
	if !b.served && v&mhi.BHIESeqMask != 0 && b.bhieOff() != 0 && off == b.bhie+mhi.BHIERxVecDB {
		b.held = v
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.BAR.Write32(off, v)
}

func (b *staleBAR) Read32(off uint64) uint32 {
	b.mu.Lock()
	if b.held == 0 || off != b.bhie+mhi.BHIERxVecStatus {
		b.mu.Unlock()
		return b.BAR.Read32(off)
	}
	db := b.held
	b.held, b.served = 0, true
	b.mu.Unlock()
	other := db&mhi.BHIESeqMask ^ 1
	if other == 0 {
		other = 2
	}
	b.BAR.Write32(b.bhie+mhi.BHIERxVecDB, db)
	return mhi.BHIEStatusXferDone<<mhi.BHIEStatusShift | other
}

// The host takes only a status that echoes its sequence for the end of
// its RDDM upload: a completed status of another transfer, seen before the
// device even started, is not it (the dump would be read before, and
// while, the device writes it).
func TestCrashDumpWaitsForItsOwnTransferStatus(t *testing.T) {
	var bar *staleBAR
	r, img := powerUpCrashed(t, func(d *vpci.Device) pci.Device {
		inner, err := d.BAR(0)
		if err != nil {
			t.Fatal(err)
		}
		bar = &staleBAR{BAR: inner}
		return bar0Device{d, bar}
	})
	bar.mu.Lock()
	served := bar.served
	bar.mu.Unlock()
	if !served {
		t.Fatal("the host never polled RXVECSTATUS after ringing RXVECDB")
	}
	d, ok := r.c.LastCrashDump()
	if !ok {
		t.Fatal("no crash dump collected")
	}
	if i := firstDiff(d.Data[:len(img)], img); i < len(img) {
		t.Fatalf("dump differs from the modem's image at byte %d: the host took another transfer's status", i)
	}
	if n := r.m.RDDMUploads(); n != 1 {
		t.Errorf("modem uploaded %d dumps, want 1", n)
	}
}

// The firmware crashes into RDDM again while the host recovers from a
// first crash (here after the channel restarts, before recovery ends):
// recovery goes round again, and the second crash's RAM dump is collected
// before that round's MHI reset, like the first. Before, only the first
// crash of a recovery episode was dumped; the retry reset the modem and
// its second dump was lost.
func TestCrashDumpCollectedAgainWhenTheModemCrashesDuringRecovery(t *testing.T) {
	_, r, dumps := crashDumpRig(t, 64<<10)
	l := newLoop(r, "LOOPBACK", 2048, 16, 16)
	rng := rand.New(rand.NewPCG(41, 42))
	l.exchange(t, rng, 5, 3000)

	first, second := bootImage(20000), bootImage(30000)
	second[0] ^= 0xFF // not a prefix of the first
	hookErr := r.failAgainAsRecoveryEnds(func() error { return r.m.TriggerCrash(second) })
	if err := r.m.TriggerCrash(first); err != nil {
		t.Fatal(err)
	}
	for i, img := range [][]byte{first, second} {
		select {
		case d := <-dumps:
			if !bytes.Equal(d.Data[:len(img)], img) {
				t.Fatalf("dump %d is not crash %d's image", i+1, i+1)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("crash %d: no crash dump delivered", i+1)
		}
	}
	if err := <-hookErr; err != nil {
		t.Fatal(err)
	}
	r.waitRecoveredTwice()
	l.exchange(t, rng, 10, 3000)
	if s := r.c.Stats(); s.CrashDumps != 2 {
		t.Errorf("stats: %d crash dumps, want 2", s.CrashDumps)
	}
	if n := r.m.RDDMUploads(); n != 2 {
		t.Errorf("modem uploaded %d dumps, want 2", n)
	}
}

// crashDumpRig powers up a foxconn-sdx55 whose RDDM size is size, dumped
// in 16 KiB segments; OnCrashDump sends each dump to the channel.
func crashDumpRig(t *testing.T, size int) (*mhi.Profile, *rig, <-chan mhi.CrashDump) {
	p := *profile(t, "foxconn-sdx55")
	p.RDDMSize = size
	dumps := make(chan mhi.CrashDump, 4)
	r := newRigProfile(t, &p, sim.Options{}, mhi.Options{
		Boot:        mhi.BootOptions{SegLen: 16 << 10},
		OnCrashDump: func(d mhi.CrashDump) { dumps <- d },
	})
	r.powerUp()
	return &p, r, dumps
}
