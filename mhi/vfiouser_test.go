package mhi_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vfiouser"
	"github.com/mhistack/mhistack/mhi/sim"
)

// newRigVFIOUser is newRig with the emulated modem behind a vfio-user
// server (mhi/pci/vpci/vfiouser, as mhictl sim serve runs it) and the
// controller on the vfio-user client backend, over a socketpair
// (mhitest.Options.VFIOUser): every register access is a message, DMA
// goes to the client's memfd arena and MSIs to its eventfds.
func newRigVFIOUser(t *testing.T, name string, so sim.Options, co mhi.Options) (*rig, *vfiouser.Server) {
	t.Helper()
	if co.Timeout == 0 {
		co.Timeout = 5 * time.Second
	}
	r := newRigWith(t, mhitest.Options{Profile: profile(t, name), Sim: so, Controller: co, VFIOUser: true})
	return r, r.srv
}

func TestVFIOUserClientPowersUpAndLoopsBack(t *testing.T) {
	r, srv := newRigVFIOUser(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	if st, ee, mission := r.c.State(); st != mhi.StateM0 || ee != mhi.EEAMSS || !mission {
		t.Fatalf("after power-up: state %s ee %s mission %v", st, ee, mission)
	}
	l := newLoop(r, "LOOPBACK", r.p.MRU, 8, 16)
	// Chained UL transfers and OVERFLOW-split DL ones, over ring wraps.
	l.exchange(t, rand.New(rand.NewPCG(41, 42)), 200, r.p.MRU*5/2)
	st := srv.Stats()
	if st.DMAMaps != 1 || st.DMAWindows != 1 {
		t.Errorf("DMA maps %d, windows %d: want the one memfd arena", st.DMAMaps, st.DMAWindows)
	}
	if st.MSIDelivered == 0 || st.MMIOWrites == 0 || st.DMABytesWritten == 0 {
		t.Errorf("server stats %+v: no MSI, doorbell or DMA went through it", st)
	}
	if st.DMAFaults != 0 {
		t.Errorf("%d refused DMAs", st.DMAFaults)
	}
}

// A server that dies under a running controller: waits fail with
// ErrRemoved instead of hanging, nothing panics, Close releases all. The
// controller may notice the death before the test's Reset (its liveness
// poll reads MHISTATUS through the dead socket): it then takes the
// channels down itself, and Reset, with nothing left to wait for, returns
// nil; otherwise Reset's own wait for RESET_CHAN's completion must end in
// ErrRemoved. Either way the controller reports the removal, and a
// command afterwards fails with ErrRemoved.
func TestVFIOUserServerDeathFailsTheControllerCleanly(t *testing.T) {
	r, srv := newRigVFIOUser(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(43, 44)), 10, 4096)
	var removedAt atomic.Int64 // UnixNano of EventRemoved, 0 before
	removed := make(chan struct{})
	var once sync.Once
	defer r.c.Subscribe(func(e mhi.Event) {
		if e.Kind == mhi.EventRemoved {
			removedAt.CompareAndSwap(0, time.Now().UnixNano())
			once.Do(func() { close(removed) })
		}
	})()
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := l.ul.Reset(ctx)
	switch {
	case errors.Is(err, mhi.ErrRemoved):
	case err == nil:
		if at := removedAt.Load(); at == 0 || at > start.UnixNano() {
			t.Fatal("channel Reset after the server died = <nil>, and the controller had not noticed the removal before it")
		}
	default:
		t.Fatalf("channel Reset after the server died = %v, want ErrRemoved", err)
	}
	select {
	case <-removed:
	case <-time.After(5 * time.Second):
		t.Fatal("no EventRemoved 5 s after the server died")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the dead server was noticed after %v", d)
	}
	if err := l.dl.Reset(ctx); err != nil && !errors.Is(err, mhi.ErrRemoved) {
		t.Errorf("DL channel Reset after the removal = %v, want nil or ErrRemoved", err)
	}
	if err := r.c.Suspend(ctx); !errors.Is(err, mhi.ErrRemoved) {
		t.Errorf("Suspend after the removal = %v, want ErrRemoved", err)
	}
}
