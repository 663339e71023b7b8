package mhi_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// An idle controller whose only user is a ControlPort blocked in Recv with
// no deadline: nothing reads a register, so only the liveness check can
// notice that the device has gone. The Recv must fail with ErrRemoved.
func TestLivenessCheckEndsARecvBlockedOnAnIdleControllerAfterRemoval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
	}{
		{"default interval", 0},
		{"100 ms", 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{LivenessInterval: tc.interval})
			r.powerUp()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			port, err := r.c.OpenControl(ctx, "LOOPBACK", mhi.ControlOptions{BufSize: 1024})
			if err != nil {
				t.Fatal(err)
			}
			defer port.Close()
			got := make(chan error, 1)
			go func() {
				_, err := port.Recv(context.Background())
				got <- err
			}()
			time.Sleep(20 * time.Millisecond) // Recv is waiting
			checks := r.c.Stats().LivenessChecks
			r.dev.Remove()
			start := time.Now()
			select {
			case err := <-got:
				if !errors.Is(err, mhi.ErrRemoved) {
					t.Fatalf("Recv after removal = %v, want ErrRemoved", err)
				}
				t.Logf("Recv returned %v %v after the removal (liveness checks before it: %d)", err, time.Since(start).Round(time.Millisecond), checks)
			case <-time.After(10 * time.Second):
				t.Fatal("Recv still blocked 10 s after the removal: nothing noticed it")
			}
			r.waitEvent(mhi.EventRemoved, time.Second)
		})
	}
}

// The check runs only while the controller is powered, and not at all when
// disabled.
func TestLivenessCheckRunsWhilePoweredOnly(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{LivenessInterval: 10 * time.Millisecond})
	time.Sleep(50 * time.Millisecond)
	if n := r.c.Stats().LivenessChecks; n != 0 {
		t.Errorf("%d liveness checks before PowerUp", n)
	}
	r.powerUp()
	deadline := time.Now().Add(5 * time.Second)
	for r.c.Stats().LivenessChecks < 3 {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 3 liveness checks in 5 s at a 10 ms interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.c.PowerDown(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := r.c.Stats().LivenessChecks
	time.Sleep(50 * time.Millisecond)
	if m := r.c.Stats().LivenessChecks; m != n {
		t.Errorf("%d liveness checks after PowerDown", m-n)
	}

	off := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{LivenessInterval: -1})
	off.powerUp()
	time.Sleep(50 * time.Millisecond)
	if n := off.c.Stats().LivenessChecks; n != 0 {
		t.Errorf("%d liveness checks with LivenessInterval -1", n)
	}
}

// removableDevice is the emulated modem's function with a removal request,
// as vfio.Device gives one when vfio-pci's request interrupt fires.
type removableDevice struct {
	*vpci.Device
	m          *sim.Modem
	requested  chan struct{}
	releasedIn chan mhi.State // the modem's state when Release came
}

func (d removableDevice) RemovalRequested() <-chan struct{} { return d.requested }

func (d removableDevice) Release() {
	st, _ := d.m.State()
	d.Remove() // reads all-ones from now on, as a released vfio device
	select {
	case d.releasedIn <- st:
	default:
	}
}

// A pci.Removable device's removal request: the engine resets MHI (the
// device stops its DMA, as under a driver's remove), fails a blocked Recv
// with ErrRemoved and releases the device, with the periodic liveness
// check disabled: before, nothing read a register on an idle controller
// and the Recv waited forever (hot-unplug of a modem driven through
// vfio-pci), and the device kept DMAing until the kernel turned bus
// mastering off.
func TestRemovalRequestResetsReleasesAndEndsABlockedRecv(t *testing.T) {
	var rd removableDevice
	events := make(chan mhi.Event, 16)
	r := mhitest.New(t, mhitest.Options{ProfileName: "foxconn-sdx55",
		Wrap: func(dev *vpci.Device) (pci.Device, error) {
			rd = removableDevice{Device: dev, m: dev.Model().(*sim.Modem), requested: make(chan struct{}), releasedIn: make(chan mhi.State, 1)}
			return rd, nil
		},
		Controller: mhi.Options{LivenessInterval: -1, OnEvent: func(e mhi.Event) {
			select {
			case events <- e:
			default:
			}
		}}})
	c := r.Controller
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port, err := c.OpenControl(ctx, "LOOPBACK", mhi.ControlOptions{BufSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	got := make(chan error, 1)
	go func() {
		for {
			// LOOPBACK echoes the writer's messages below.
			if _, err := port.Recv(context.Background()); err != nil {
				got <- err
				return
			}
		}
	}()
	// A writer rings the UL doorbell as fast as it can across the
	// request: no doorbell may reach the modem after its reset.
	sent := make(chan int, 1)
	go func() {
		n := 0
		for port.Send(context.Background(), []byte("mhistack")) == nil {
			n++
		}
		sent <- n
	}()
	time.Sleep(20 * time.Millisecond)
	close(rd.requested)
	select {
	case st := <-rd.releasedIn:
		if st == mhi.StateM0 {
			t.Errorf("released with the modem still in M0: no MHI reset first")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the device was not released within 5 s of the request")
	}
	select {
	case err := <-got:
		if !errors.Is(err, mhi.ErrRemoved) {
			t.Fatalf("Recv after the removal request = %v, want ErrRemoved", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Recv still blocked 5 s after the removal request")
	}
	select {
	case n := <-sent:
		t.Logf("%d messages sent before the removal", n)
	case <-time.After(5 * time.Second):
		t.Fatal("Send still succeeding 5 s after the removal")
	}
	// The rig reports the modem's protocol violations at cleanup.
	for {
		select {
		case e := <-events:
			if e.Kind == mhi.EventRemoved {
				return
			}
		case <-time.After(time.Second):
			t.Fatal("no EventRemoved")
		}
	}
}

// removedAtBAR is BAR 0 of an emulated function surprise-removed as the
// host reads register at (the first time): that read and every later
// access read all-ones, as a vfio-user device does once its server was
// declared gone. It is used through bar0Device.
type removedAtBAR struct {
	pci.BAR
	dev *vpci.Device
	at  uint64
	hit atomic.Bool
}

func (b *removedAtBAR) Read32(off uint64) uint32 {
	if off == b.at && !b.hit.Swap(true) {
		b.dev.Remove()
	}
	return b.BAR.Read32(off)
}

// A device removed while PowerUp reads the doorbell offsets fails PowerUp
// with ErrRemoved: before, the all-ones CHDBOFF/ERDBOFF were reported as
// a protocol error (a vfio-user server that hung during stack.Open).
func TestRemovalWhilePowerUpReadsTheDoorbellOffsetsIsErrRemoved(t *testing.T) {
	for _, reg := range []struct {
		name string
		off  uint64
	}{{"CHDBOFF", mhi.RegCHDBOFF}, {"ERDBOFF", mhi.RegERDBOFF}} {
		t.Run(reg.name, func(t *testing.T) {
			var bar0 *removedAtBAR
			r := mhitest.New(t, mhitest.Options{ProfileName: "foxconn-sdx55",
				Wrap: func(dev *vpci.Device) (pci.Device, error) {
					bar, err := dev.BAR(0)
					if err != nil {
						return nil, err
					}
					bar0 = &removedAtBAR{BAR: bar, dev: dev, at: reg.off}
					return bar0Device{Device: dev, bar0: bar0}, nil
				},
				Controller: mhi.Options{LivenessInterval: -1},
				NoPowerUp:  true,
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := r.Controller.PowerUp(ctx)
			if !bar0.hit.Load() {
				t.Fatalf("PowerUp never read %s (%v)", reg.name, err)
			}
			if !errors.Is(err, mhi.ErrRemoved) {
				t.Fatalf("PowerUp with the device removed at %s = %v, want ErrRemoved", reg.name, err)
			}
		})
	}
}
