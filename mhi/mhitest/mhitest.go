// Package mhitest builds the test rig of the MHI host engine, in the
// style of net/http/httptest: a strict emulated modem (mhi/sim) on the
// in-process virtual PCI bus (mhi/pci/vpci), and an *mhi.Controller that
// drives it, powered up to mission mode.
//
// New is for tests: it takes a testing.TB, fails the test when the rig
// cannot be built, registers the teardown with t.Cleanup and reports
// every host protocol violation the strict modem sees and every DMA fault
// the bus refuses as a test error. Start is the same rig for code that is
// not a test (benchmark harnesses): it returns errors, and Close returns
// the violations and faults.
//
//	func TestSomething(t *testing.T) {
//		r := mhitest.New(t, mhitest.Options{ProfileName: "foxconn-sdx55"})
//		ul, dl, err := r.Controller.ChannelPair("LOOPBACK", ...)
//		...
//	}
//
// link/linktest builds on it with a link endpoint on a channel pair.
package mhitest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vfiouserclient"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vfiouser"
	"github.com/mhistack/mhistack/mhi/sim"
)

// DefaultProfile is the modem profile a rig emulates when Options names
// none.
const DefaultProfile = "qcom-sdx55m"

// Defaults of Options.
const (
	DefaultTimeout        = 3 * time.Second  // the controller's command timeout
	DefaultPowerUpTimeout = 10 * time.Second // the bound of PowerUp
)

// Options configures a rig. The zero value is an emulated qcom-sdx55m in
// mission mode with a Loopback on its LOOPBACK channels.
type Options struct {
	// Profile is the modem the rig emulates; nil: the profile named by
	// ProfileName (default DefaultProfile) in mhi's table.
	Profile     *mhi.Profile
	ProfileName string

	// Sim configures the emulated modem: its boot stage, its faults
	// (DrainDMAOnSysErr, LoseFirmwareOnSysErr …), its timings. The rig
	// sets Strict; OnViolation defaults to reporting the violation as a
	// failure of the rig (a test that provokes violations on purpose
	// passes its own).
	Sim sim.Options
	// Functions attach functions to the modem's channel pairs by name,
	// in addition to Sim.Functions (a name in both takes this one).
	Functions map[string]sim.Function

	// IOVAWindow, when not 0, is the size of the bus's DMA window
	// (vpci.WithIOVAWindow): a test of DMA exhaustion sets a small one.
	IOVAWindow uint64
	// Bus are more options of the virtual bus, applied after the rig's:
	// the rig installs a fault handler that reports every refused DMA as
	// a failure of the rig, and a vpci.WithFaultHandler here replaces it
	// (a test that collects the faults a hostile device causes).
	Bus []vpci.Option
	// Wrap, when set, gives the controller wrap(dev) to drive instead of
	// the bus device itself: a test that changes what the backend can do
	// (a vfio-user client, a device without MSI).
	Wrap func(*vpci.Device) (pci.Device, error)

	// VFIOUser serves the modem over vfio-user (mhi/pci/vpci/vfiouser,
	// as mhictl sim serve does) on a socketpair and drives it with the
	// vfio-user client backend (mhi/pci/vfiouserclient): every register
	// access is a message, DMA goes to the client's memfd arena, MSIs to
	// its eventfds. There is no virtual bus device then (Rig.Device is
	// nil, Rig.Server is the server), and IOVAWindow, Bus and Wrap must be
	// unset.
	VFIOUser bool

	// Controller configures the host controller. The rig sets Profile;
	// Timeout defaults to DefaultTimeout.
	Controller mhi.Options
	// NoPowerUp leaves the controller in reset: the test powers it up
	// (PowerUp) when it wants.
	NoPowerUp bool
}

// Rig is an emulated modem on the virtual bus and the controller driving
// it. Its fields are for the test to use; Close (or, with New, the
// test's cleanup) tears it down.
type Rig struct {
	Profile    *mhi.Profile
	Device     *vpci.Device // the virtual bus device of the modem
	Modem      *sim.Modem   // the emulated modem
	Host       pci.Device   // the device the controller drives: Device, or what Options.Wrap made of it
	Controller *mhi.Controller
	// Server is the vfio-user server the modem is served by
	// (Options.VFIOUser), nil otherwise.
	Server *vfiouser.Server
	served chan error

	mu       sync.Mutex
	failures []string
	forgive  []func(string) bool // ForgiveFailures' matches
	closed   bool
	closeErr error
}

// Start builds the rig and, unless o.NoPowerUp, powers the controller up
// to mission mode. Host protocol violations and DMA faults are recorded
// (Failures) and returned by Close.
func Start(o Options) (*Rig, error) {
	p := o.Profile
	if p == nil {
		name := o.ProfileName
		if name == "" {
			name = DefaultProfile
		}
		var ok bool
		if p, ok = mhi.Lookup(name); !ok {
			return nil, fmt.Errorf("mhitest: no profile %s", name)
		}
	}
	r := &Rig{Profile: p}
	so := o.Sim
	so.Strict = true
	if so.OnViolation == nil {
		so.OnViolation = func(err error) { r.Fail("protocol violation: " + err.Error()) }
	}
	if len(o.Functions) > 0 {
		fns := make(map[string]sim.Function, len(so.Functions)+len(o.Functions))
		for k, v := range so.Functions {
			fns[k] = v
		}
		for k, v := range o.Functions {
			fns[k] = v
		}
		so.Functions = fns
	}
	if o.VFIOUser {
		if o.IOVAWindow != 0 || len(o.Bus) != 0 || o.Wrap != nil {
			return nil, errors.New("mhitest: IOVAWindow, Bus and Wrap are options of the virtual bus, not of VFIOUser")
		}
		if err := r.serveVFIOUser(so); err != nil {
			return nil, err
		}
	} else {
		bus := []vpci.Option{vpci.WithFaultHandler(r.fault)}
		if o.IOVAWindow != 0 {
			bus = append(bus, vpci.WithIOVAWindow(o.IOVAWindow))
		}
		bus = append(bus, o.Bus...)
		dev, m, err := sim.NewDevice(p, so, bus...)
		if err != nil {
			return nil, fmt.Errorf("emulated %s: %w", p.Name, err)
		}
		r.Device, r.Modem, r.Host = dev, m, dev
		if o.Wrap != nil {
			if r.Host, err = o.Wrap(dev); err != nil {
				dev.Close()
				return nil, fmt.Errorf("wrap %s: %w", p.Name, err)
			}
		}
	}
	co := o.Controller
	co.Profile = p
	if co.Timeout == 0 {
		co.Timeout = DefaultTimeout
	}
	c, err := mhi.New(r.Host, co)
	if err != nil {
		r.closeDevice()
		return nil, fmt.Errorf("mhi.New(%s): %w", p.Name, err)
	}
	r.Controller = c
	if !o.NoPowerUp {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultPowerUpTimeout)
		defer cancel()
		if err := c.PowerUp(ctx); err != nil {
			r.Close()
			return nil, fmt.Errorf("PowerUp: %w", err)
		}
	}
	return r, nil
}

// New is Start for a test: it fails the test (t.Fatal) when the rig
// cannot be built, and closes the rig in t.Cleanup, reporting with
// t.Error what Close returns (a Close error, each host protocol
// violation and each DMA fault).
func New(t testing.TB, o Options) *Rig {
	t.Helper()
	r, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ReportClose(t, r.Close) })
	return r
}

// ReportClose calls close and reports with t.Error each error it
// returns, one per line of an errors.Join.
func ReportClose(t testing.TB, close func() error) {
	t.Helper()
	err := close()
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			t.Error(e)
		}
		return
	}
	t.Error(err)
}

// Fail records a failure of the rig, which Close returns. The model's
// goroutines report violations and DMA faults through it, where t.Error
// may no longer be called; a test's own device-side hooks may as well.
func (r *Rig) Fail(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, match := range r.forgive {
		if match(s) {
			return
		}
	}
	r.failures = append(r.failures, s)
}

// Failures returns the failures recorded so far.
func (r *Rig) Failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failures...)
}

// ForgiveFailures removes the recorded failures match accepts, and keeps
// out those it accepts from now on (the model may go on failing the same
// way until Close), and returns how many it removed: a test that provokes
// some failures on purpose (DMA faults of a removed device) keeps the
// others reported.
func (r *Rig) ForgiveFailures(match func(failure string) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgive = append(r.forgive, match)
	kept := r.failures[:0]
	for _, f := range r.failures {
		if !match(f) {
			kept = append(kept, f)
		}
	}
	n := len(r.failures) - len(kept)
	r.failures = kept
	return n
}

// PowerUp powers the controller up to mission mode (for a rig started
// with NoPowerUp), bounded by DefaultPowerUpTimeout and ctx.
func (r *Rig) PowerUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultPowerUpTimeout)
	defer cancel()
	return r.Controller.PowerUp(ctx)
}

// Close closes the controller and then the device, and returns their
// errors and the rig's failures, joined. It is idempotent: a second call
// returns what the first did.
func (r *Rig) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return r.closeErr
	}
	r.closed = true
	r.mu.Unlock()
	var errs []error
	if err := r.Controller.Close(); err != nil {
		errs = append(errs, fmt.Errorf("controller Close: %w", err))
	}
	if err := r.closeDevice(); err != nil {
		errs = append(errs, fmt.Errorf("device Close: %w", err))
	}
	for _, f := range r.Failures() {
		errs = append(errs, errors.New(f))
	}
	err := errors.Join(errs...)
	r.mu.Lock()
	r.closeErr = err
	r.mu.Unlock()
	return err
}

func (r *Rig) fault(f vpci.Fault) { r.Fail("DMA fault: " + f.Error()) }

// serveVFIOUser builds the modem behind a vfio-user server on one end of
// a socketpair and the client device on the other (Options.VFIOUser).
func (r *Rig) serveVFIOUser(so sim.Options) error {
	m, err := sim.New(r.Profile, so)
	if err != nil {
		return fmt.Errorf("emulated %s: %w", r.Profile.Name, err)
	}
	srv, err := vfiouser.New(m, vfiouser.WithFaultHandler(r.fault))
	if err != nil {
		return fmt.Errorf("vfio-user server: %w", err)
	}
	sconn, cconn, err := vfiouser.Socketpair()
	if err != nil {
		return err
	}
	r.Modem, r.Server, r.served = m, srv, make(chan error, 1)
	go func() { r.served <- srv.ServeConn(sconn) }()
	dev, err := vfiouserclient.New(cconn, "socketpair", nil)
	if err != nil {
		cconn.Close()
		srv.Close()
		<-r.served
		return fmt.Errorf("vfio-user client: %w", err)
	}
	r.Host = dev
	return nil
}

// closeDevice closes the device the controller drove: the bus device, or
// the vfio-user client and then the server (a client whose server died
// closes with mhi.ErrRemoved, which is not an error here).
func (r *Rig) closeDevice() error {
	if r.Server == nil {
		return r.Device.Close()
	}
	err := r.Host.Close()
	if errors.Is(err, mhi.ErrRemoved) {
		err = nil
	}
	r.Server.Close()
	<-r.served
	return err
}
