package mhi_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci/vfiouserclient"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vfiouser"
	"github.com/mhistack/mhistack/mhi/sim"
)

// newRigVFIOUser is newRig with the emulated modem behind a vfio-user
// server (mhi/pci/vpci/vfiouser, as mhictl sim serve runs it) and the
// controller on the vfio-user client backend, over a socketpair: every
// register access is a message, DMA goes to the client's memfd arena and
// MSIs to its eventfds.
func newRigVFIOUser(t *testing.T, name string, so sim.Options, co mhi.Options) (*rig, *vfiouser.Server) {
	t.Helper()
	r := &rig{t: t, p: profile(t, name), evCh: make(chan mhi.Event, 64)}
	fl := &failLog{}
	fail := fl.add
	so.Strict = true
	so.OnViolation = func(err error) { fail("protocol violation: " + err.Error()) }
	m, err := sim.New(r.p, so)
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	srv, err := vfiouser.New(m, vfiouser.WithFaultHandler(func(f vpci.Fault) { fail("DMA fault: " + f.Error()) }))
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "vfio-user")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeConn(conns[0]) }()
	dev, err := vfiouserclient.New(conns[1], "socketpair", nil)
	if err != nil {
		srv.Close()
		<-served
		t.Fatalf("vfio-user client: %v", err)
	}
	r.host = dev
	co.Profile = r.p
	if co.Timeout == 0 {
		co.Timeout = 5 * time.Second
	}
	co.OnEvent = func(e mhi.Event) {
		select {
		case r.evCh <- e:
		default:
		}
	}
	c, err := mhi.New(dev, co)
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("controller Close: %v", err)
		}
		if err := dev.Close(); err != nil && !errors.Is(err, mhi.ErrRemoved) {
			t.Errorf("device Close: %v", err)
		}
		srv.Close()
		<-served
		fl.report(t)
	})
	return r, srv
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
// ErrRemoved instead of hanging, nothing panics, Close releases all.
func TestVFIOUserServerDeathFailsTheControllerCleanly(t *testing.T) {
	r, srv := newRigVFIOUser(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(43, 44)), 10, 4096)
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := l.ul.Reset(ctx)
	if !errors.Is(err, mhi.ErrRemoved) {
		t.Fatalf("channel Reset after the server died = %v, want ErrRemoved", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the dead server was noticed after %v", d)
	}
}

// failLog collects failures reported from the model's goroutines
// (violations, DMA faults), where t.Error may no longer be called, for
// the test's cleanup to report (mhitest.Rig does this for the rigs on the
// virtual bus).
type failLog struct {
	mu   sync.Mutex
	list []string
}

func (f *failLog) add(s string) {
	f.mu.Lock()
	f.list = append(f.list, s)
	f.mu.Unlock()
}

func (f *failLog) report(t testing.TB) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.list {
		t.Error(s)
	}
}
