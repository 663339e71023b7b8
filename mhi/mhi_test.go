package mhi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPowerUpEveryProfileFromAMSS(t *testing.T) {
	for _, p := range mhi.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, p.Name, sim.Options{}, mhi.Options{})
			r.powerUp()
			st, ee, mission := r.c.State()
			if st != mhi.StateM0 || ee != mhi.EEAMSS || !mission {
				t.Fatalf("after power-up: state %s ee %s mission %v", st, ee, mission)
			}
			r.waitEvent(mhi.EventMissionMode, time.Second)
			if dst, dee := r.m.State(); dst != mhi.StateM0 || dee != mhi.EEAMSS {
				t.Fatalf("device thinks it is in %s/%s", dst, dee)
			}
		})
	}
}

func TestPowerUpEveryProfileFromPBLDownloadsTheImage(t *testing.T) {
	image := bytes.Repeat([]byte("sbl1.mbn-"), 4000)
	for _, p := range mhi.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			var asked string
			// Profiles without a firmware name still load one: the
			// emulated PBL waits for a download.
			if p.FirmwareImage == "" {
				p = withImage(p)
			}
			r := newRigProfile(t, p, sim.Options{Boot: sim.BootPBL}, mhi.Options{
				Firmware: func(name string) ([]byte, error) { asked = name; return image, nil },
			})
			r.powerUp()
			if _, ee, mission := r.c.State(); ee != mhi.EEAMSS || !mission {
				t.Fatalf("after PBL power-up: ee %s mission %v", ee, mission)
			}
			got := r.m.BHIImage()
			if sha256.Sum256(got.Data) != sha256.Sum256(image) {
				t.Fatalf("device received %d bytes, want the %d-byte image", len(got.Data), len(image))
			}
			if asked != p.FirmwareImage {
				t.Fatalf("firmware loader asked for %q, want %q", asked, p.FirmwareImage)
			}
		})
	}
}

// withImage returns a copy of p that names a boot image.
func withImage(p *mhi.Profile) *mhi.Profile {
	q := *p
	q.FirmwareImage = "test/sbl.mbn"
	return &q
}

func TestBHIErrorCodeIsSurfaced(t *testing.T) {
	r := newRig(t, "qcom-sdx55m", sim.Options{Boot: sim.BootPBL, BHIErrCode: 0x2b},
		mhi.Options{Firmware: func(string) ([]byte, error) { return []byte("image"), nil }})
	err := r.c.PowerUp(context.Background())
	if !errors.Is(err, mhi.ErrFirmware) {
		t.Fatalf("PowerUp = %v, want ErrFirmware", err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte("0x2b")) {
		t.Errorf("error %q does not name the BHI error code 0x2b", err)
	}
}

func TestChannelStartSendsStartCommandAndWaitsForCompletion(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	ul, err := r.c.Channel(0, mhi.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ul.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got := ul.FreeCount(); got != ul.Elements()-1 {
		t.Errorf("free descriptors after start = %d, want N-1 = %d", got, ul.Elements()-1)
	}
	if _, err := r.c.Channel(0, mhi.ChannelOptions{}); err == nil {
		t.Error("a running channel was claimed twice")
	}
	if err := ul.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := ul.Start(ctx); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	if err := ul.Reset(ctx); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	buf, _ := r.dev.DMA().Alloc(64, 64)
	defer r.dev.DMA().Free(buf)
	if err := ul.Queue(buf, 64, mhi.EOT); !errors.Is(err, mhi.ErrNotRunning) {
		t.Errorf("Queue on a reset channel = %v, want ErrNotRunning", err)
	}
	if err := ul.Start(ctx); err != nil {
		t.Fatalf("Start after Reset: %v", err)
	}
	if s := r.c.Stats(); s.Commands != 5 || s.CommandTimeouts != 0 {
		t.Errorf("commands %d timeouts %d, want 5 and 0", s.Commands, s.CommandTimeouts)
	}
}

func TestChannelOutsideCurrentEEIsRefused(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	fh, err := r.c.Channel(34, mhi.ChannelOptions{}) // FIREHOSE: FP only
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Start(context.Background()); !errors.Is(err, mhi.ErrState) {
		t.Fatalf("starting FIREHOSE in AMSS = %v, want ErrState", err)
	}
}

func TestLoopbackIntegrityOverManyRingWraps(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	mru := r.p.MRU
	l := newLoop(r, "LOOPBACK", mru, 8, 16)
	rng := rand.New(rand.NewPCG(1, 2))
	// 32-element rings: 400 transfers wrap the UL ring more than ten
	// times; transfers up to 2.5 MRU are chained on UL and split with
	// OVERFLOW on DL.
	l.exchange(t, rng, 400, mru*5/2)
	ul, dl := l.ul.Stats(), l.dl.Stats()
	if ul.Completed < 10*uint64(l.ul.Elements()) {
		t.Errorf("UL completed %d TREs, want ≥ 10 ring wraps (%d)", ul.Completed, 10*l.ul.Elements())
	}
	if dl.Completed <= 400 {
		t.Errorf("DL completed %d buffers for 400 transfers: no OVERFLOW split happened", dl.Completed)
	}
}

func TestBurstModeChannelKeepsFlowingAfterDeviceGoesIdle(t *testing.T) {
	r := newRig(t, "qcom-sdx55m", sim.Options{
		Functions: map[string]sim.Function{"IP_HW0": &sim.Loopback{}},
		BurstIdle: time.Millisecond,
	}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "IP_HW0", 2048, 32, 32)
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 5; round++ {
		l.exchange(t, rng, 50, 1500)
		// Let the device stop polling and send DB_MODE.
		time.Sleep(10 * time.Millisecond)
	}
	if s := r.m.Stats(); s.DBModes == 0 {
		t.Fatal("the device never went idle (no DB_MODE): test proves nothing")
	}
}

func TestModeratedRingsStillComplete(t *testing.T) {
	// IP_HW0 completes on hardware rings with 1 ms INTMODT: every TRE
	// carries BEI and the device must raise the MSI after INTMODT.
	r := newRig(t, "qcom-sdx55m", sim.Options{
		Functions: map[string]sim.Function{"IP_HW0": &sim.Loopback{}},
	}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "IP_HW0", 2048, 16, 16)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20; i++ {
		l.exchange(t, rng, 1, 1000) // one at a time: only the timer can wake us
	}
	if s := r.m.Stats(); s.MSIsModerated == 0 {
		t.Fatal("no event was moderated: BEI not set on HW channel TREs")
	}
}

func TestSysErrDuringTrafficRecoversAndLoopbackResumes(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	rng := rand.New(rand.NewPCG(7, 8))
	l.exchange(t, rng, 50, 4096)
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(mhi.EventSysErr, 5*time.Second)
	r.waitEvent(mhi.EventRecovered, 10*time.Second)
	// Transfers in flight at the SYS_ERR are gone; drain stragglers.
	for len(l.got) > 0 {
		<-l.got
	}
	l.exchange(t, rng, 100, 4096)
	if s := r.c.Stats(); s.SysErrs != 1 || s.Recoveries != 1 {
		t.Errorf("sys errs %d recoveries %d, want 1 and 1", s.SysErrs, s.Recoveries)
	}
}

func TestSuspendToM3AndResumeToM0(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	rng := rand.New(rand.NewPCG(9, 10))
	l.exchange(t, rng, 20, 4096)
	ctx := context.Background()
	if err := r.c.Suspend(ctx); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	if st, _ := r.m.State(); st != mhi.StateM3 {
		t.Fatalf("device state %s after suspend", st)
	}
	// Queued while suspended: written to memory, rung at M0.
	if err := l.send(ctx, []byte("queued in M3")); err != nil {
		t.Fatal(err)
	}
	if err := r.c.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	got, err := l.recv(5 * time.Second)
	if err != nil || string(got) != "queued in M3" {
		t.Fatalf("after resume: %q, %v", got, err)
	}
	l.exchange(t, rng, 20, 4096)
}

func TestCommandThatNeverCompletesTimesOut(t *testing.T) {
	var violations atomic.Int32
	r := newRig(t, "foxconn-sdx55", sim.Options{OnViolation: func(error) { violations.Add(1) }},
		mhi.Options{Timeout: 300 * time.Millisecond})
	r.powerUp()
	// Channel 64 is in no profile: the device drops the command without a
	// completion, as newer Linux EP stacks do.
	start := time.Now()
	err := mhi.SendCommandForTest(r.c, mhi.TypeStartCmd, 64)
	if !errors.Is(err, mhi.ErrTimeout) {
		t.Fatalf("command = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("timeout took %v", d)
	}
	if violations.Load() != 1 {
		t.Errorf("the device reported %d violations, want 1 (the unknown channel)", violations.Load())
	}
	// The engine still works afterwards.
	l := newLoop(r, "LOOPBACK", 4096, 4, 4)
	l.exchange(t, rand.New(rand.NewPCG(11, 12)), 10, 4096)
}

func TestControlPortSendsAndReceivesMessages(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	port, err := r.c.OpenControl(ctx, "LOOPBACK", mhi.ControlOptions{BufSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	for i := 0; i < 50; i++ {
		msg := bytes.Repeat([]byte{byte(i)}, 1+i*20)
		if err := port.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		got, err := port.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("message %d: got %d bytes, want %d", i, len(got), len(msg))
		}
	}
}

func TestPowerDownAndPowerUpAgain(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(13, 14)), 10, 4096)
	if err := r.c.PowerDown(context.Background()); err != nil {
		t.Fatalf("PowerDown: %v", err)
	}
	if len(l.rxFree) != 8 {
		t.Errorf("after power-down %d of 8 DL buffers returned", len(l.rxFree))
	}
	r.powerUp()
	l2 := newLoopOn(r, l)
	l2.exchange(t, rand.New(rand.NewPCG(15, 16)), 10, 4096)
}

// newLoopOn restarts l's channels after a power cycle.
func newLoopOn(r *rig, l *loop) *loop {
	ctx := context.Background()
	if err := l.ul.Start(ctx); err != nil {
		r.t.Fatal(err)
	}
	if err := l.dl.Start(ctx); err != nil {
		r.t.Fatal(err)
	}
	l.refill()
	return l
}

func TestSurpriseRemovalFailsWaitsInsteadOfHanging(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{Timeout: 5 * time.Second})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(17, 18)), 5, 4096)
	r.dev.Remove()
	start := time.Now()
	err := l.ul.Reset(context.Background())
	if !errors.Is(err, mhi.ErrRemoved) {
		t.Fatalf("Reset after removal = %v, want ErrRemoved", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("removal noticed after %v", d)
	}
	r.waitEvent(mhi.EventRemoved, time.Second)
}

func TestDevicePointerOutsideRingIsRefused(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	rng := rand.New(rand.NewPCG(19, 20))
	l.exchange(t, rng, 5, 4096)
	er, _ := r.c.EventRing(0)
	before := er.Stats().Invalid
	// A hostile device: event ring 0's rp points outside the ring, then
	// a TX event names a TRE outside the channel ring.
	mhi.CorruptEventRPForTest(r.c, 0, 0xdead0000)
	er.Poll(16, func(mhi.Completion) { t.Error("completion from a corrupt ring pointer") })
	if er.Stats().Invalid == before {
		t.Fatal("a device rp outside the ring was not counted as invalid")
	}
	mhi.RestoreEventRPForTest(r.c, 0)
	// Events posted the device's way that name no outstanding TRE: outside
	// the DL ring, and a TRE of the ring the host never queued.
	for _, ev := range []mhi.Element{
		mhi.TxEvent(0xdead0000, 10, mhi.CodeEOT, 1),
		mhi.TxEvent(mhi.UnqueuedTREForTest(l.dl), 10, mhi.CodeEOT, 1),
		mhi.TxEvent(0x10, 10, mhi.CodeSuccess, 1), // SUCCESS completes nothing
		mhi.TxEvent(0x10, 10, mhi.CodeEOT, 77),    // no such channel on this ring
	} {
		before = er.Stats().Invalid
		if err := r.m.InjectEvent(0, ev); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for er.Stats().Invalid == before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if er.Stats().Invalid == before {
			t.Fatalf("event %+v was not refused", ev)
		}
	}
	l.exchange(t, rng, 10, 4096)
}

func TestDeviceIdleM1IsAcknowledgedWithM2AndWokenByTheWakeDoorbell(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	rng := rand.New(rand.NewPCG(21, 22))
	l.exchange(t, rng, 5, 4096)
	if err := r.m.EnterM1(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if st, _ := r.m.State(); st == mhi.StateM2 {
			break
		}
		if time.Now().After(deadline) {
			st, _ := r.m.State()
			t.Fatalf("device in %s, want M2 after the host acknowledged M1", st)
		}
		time.Sleep(time.Millisecond)
	}
	// Traffic while in M2: the host asserts the wake doorbell, the device
	// returns to M0, and the data flows.
	l.exchange(t, rng, 20, 4096)
	if st, _ := r.m.State(); st != mhi.StateM0 {
		t.Fatalf("device in %s after traffic, want M0", st)
	}
}

func TestPowerUpOfADeviceInSysErrBootsFromTheEEItResetsInto(t *testing.T) {
	// The modem crashed before the host came, and loses its firmware in
	// the reset: power-up must reset it, see PBL, and download again.
	image := bytes.Repeat([]byte("sbl"), 1000)
	p := withImage(profile(t, "foxconn-sdx55"))
	r := newRigProfile(t, p, sim.Options{LoseFirmwareOnSysErr: true}, mhi.Options{
		Firmware: func(string) ([]byte, error) { return image, nil },
	})
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	r.powerUp()
	if _, ee, mission := r.c.State(); ee != mhi.EEAMSS || !mission {
		t.Fatalf("after power-up: ee %s mission %v", ee, mission)
	}
	if got := r.m.BHIImage(); !bytes.Equal(got.Data, image) {
		t.Fatalf("device received %d bytes, want the %d-byte image again", len(got.Data), len(image))
	}
}
