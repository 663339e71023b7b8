package mhitest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Start powers an emulated modem up to mission mode; Close tears it down
// and returns the host protocol violations the strict modem saw.
func ExampleStart() {
	r, err := mhitest.Start(mhitest.Options{ProfileName: "foxconn-sdx55"})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, ee, mission := r.Controller.State()
	fmt.Println(r.Profile.Name, st, ee, mission)
	fmt.Println("Close:", r.Close())
	// Output:
	// foxconn-sdx55 M0 AMSS true
	// Close: <nil>
}

// NoPowerUp leaves the controller in reset, for a test that powers it up
// itself or changes the modem first.
func ExampleOptions_noPowerUp() {
	r, err := mhitest.Start(mhitest.Options{NoPowerUp: true, Sim: sim.Options{SBLTime: time.Millisecond}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	_, _, mission := r.Controller.State()
	fmt.Println("mission mode before:", mission)
	if err := r.PowerUp(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	_, _, mission = r.Controller.State()
	fmt.Println("mission mode after:", mission)
	// Output:
	// mission mode before: false
	// mission mode after: true
}

// New is the rig of a test: the teardown is the test's cleanup, and what
// went wrong (a violation, a DMA fault) fails the test.
func TestNewClosesInCleanup(t *testing.T) {
	var r *mhitest.Rig
	t.Run("rig", func(t *testing.T) {
		r = mhitest.New(t, mhitest.Options{Controller: mhi.Options{Timeout: time.Second}})
		if _, _, mission := r.Controller.State(); !mission {
			t.Fatal("not in mission mode after New")
		}
	})
	// The subtest's cleanup closed the rig; closing again returns what
	// the first Close did.
	if err := r.Close(); err != nil {
		t.Fatalf("Close after cleanup = %v", err)
	}
}

// A violation the modem reports, or a DMA fault, is returned by Close
// (and, through New, fails the test).
func TestCloseReturnsFailures(t *testing.T) {
	r, err := mhitest.Start(mhitest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Fail("protocol violation: made up")
	err = r.Close()
	if err == nil || err.Error() != "protocol violation: made up" {
		t.Fatalf("Close = %v, want the recorded violation", err)
	}
	ft := &fakeTB{TB: t}
	mhitest.ReportClose(ft, r.Close)
	if len(ft.errs) != 1 {
		t.Fatalf("ReportClose reported %q, want the one failure", ft.errs)
	}
}

func TestStartRefusesAnUnknownProfile(t *testing.T) {
	if _, err := mhitest.Start(mhitest.Options{ProfileName: "no-such-modem"}); err == nil {
		t.Fatal("Start with an unknown profile succeeded")
	}
}

type fakeTB struct {
	testing.TB
	errs []string
}

func (f *fakeTB) Helper()        {}
func (f *fakeTB) Error(a ...any) { f.errs = append(f.errs, fmt.Sprint(a...)) }

// A failure ForgiveFailures accepts is forgiven when it comes after the
// call too: a removed device's DMA keeps failing until Close (a burst
// channel's poll or doorbell-mode watchdog). Before, only the failures
// recorded so far were removed, and a late one failed the removal test.
func TestForgiveFailuresKeepsOutLaterOnes(t *testing.T) {
	r, err := mhitest.Start(mhitest.Options{ProfileName: "foxconn-sdx55"})
	if err != nil {
		t.Fatal(err)
	}
	r.Fail("DMA fault: device removed (before)")
	r.Fail("protocol violation: something else")
	if n := r.ForgiveFailures(func(f string) bool { return strings.Contains(f, "device removed") }); n != 1 {
		t.Errorf("ForgiveFailures removed %d, want 1", n)
	}
	r.Fail("DMA fault: device removed (after)")
	if f := r.Failures(); len(f) != 1 || f[0] != "protocol violation: something else" {
		t.Errorf("failures %q, want only the violation", f)
	}
	if err := r.Close(); err == nil || strings.Contains(err.Error(), "device removed") {
		t.Errorf("Close = %v, want the violation only", err)
	}
}

// VFIOUser puts the modem behind a vfio-user server and the controller
// on the vfio-user client: no virtual bus device, the same mission mode.
func ExampleOptions_vfioUser() {
	r, err := mhitest.Start(mhitest.Options{VFIOUser: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _, mission := r.Controller.State()
	fmt.Println("mission mode:", mission, "bus device:", r.Device != nil, "server:", r.Server != nil)
	fmt.Println("Close:", r.Close())
	// Output:
	// mission mode: true bus device: false server: true
	// Close: <nil>
}

func TestVFIOUserRefusesBusOptions(t *testing.T) {
	if _, err := mhitest.Start(mhitest.Options{VFIOUser: true, IOVAWindow: 1 << 20}); err == nil {
		t.Fatal("Start with VFIOUser and an IOVA window succeeded")
	}
}
