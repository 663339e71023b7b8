package mhi_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// The firmware crashes into RDDM: the host collects the RAM dump over BHIe
// before it resets the modem, delivers it byte-exact (OnCrashDump,
// LastCrashDump, EventCrashDump), then recovers and data flows again.
func TestCrashDumpCollectedOverBHIeThenRecovered(t *testing.T) {
	p := *profile(t, "foxconn-sdx55")
	p.RDDMSize = 96 << 10
	dumps := make(chan mhi.CrashDump, 4)
	r := newRigProfile(t, &p, sim.Options{}, mhi.Options{
		Boot:        mhi.BootOptions{SegLen: 16 << 10},
		OnCrashDump: func(d mhi.CrashDump) { dumps <- d },
	})
	r.powerUp()
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
	p := *profile(t, "foxconn-sdx55")
	p.RDDMSize = 8 << 10
	r := newRigProfile(t, &p, sim.Options{}, mhi.Options{})
	img := bootImage(5000)
	if err := r.m.TriggerCrash(img); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.PowerUp(ctx); err != nil {
		t.Fatalf("PowerUp of a modem in RDDM: %v", err)
	}
	d, ok := r.c.LastCrashDump()
	if !ok || !bytes.Equal(d.Data[:len(img)], img) {
		t.Fatalf("LastCrashDump = %v, want the modem's image", ok)
	}
}
