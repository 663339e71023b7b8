package mbim_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
)

func TestSessionBringsUpDualStackAndReportsEveryStep(t *testing.T) {
	c, _ := pipeRig(t, onNetwork(simnet.NetworkConfig{RadioOff: true}), mbim.Options{})
	log := newProgressLog()
	s := mbim.NewSession(c, fastSession("internet", log))
	defer s.Close(context.Background())
	ip, err := s.WaitUp(testCtx(t))
	if err != nil {
		t.Fatalf("WaitUp: %v", err)
	}
	car := simnet.DefaultCarrier()
	if !slices.Equal(ip.IPv4, []netip.Prefix{car.IPv4}) || !slices.Equal(ip.IPv6, []netip.Prefix{car.IPv6}) ||
		ip.IPv4Gateway != car.IPv4Gateway || ip.IPv6Gateway != car.IPv6Gateway ||
		!slices.Equal(ip.IPv4DNS, car.IPv4DNS) || !slices.Equal(ip.IPv6DNS, car.IPv6DNS) || ip.IPv4MTU != 1500 || ip.IPv6MTU != 1500 {
		t.Errorf("IP configuration %v, want the carrier's %+v", ip, car)
	}
	want := []mbim.SessionState{mbim.StateOpening, mbim.StateWaitingSIM, mbim.StateRadioOn, mbim.StateRegistering,
		mbim.StateAttaching, mbim.StateConnecting, mbim.StateConfiguring, mbim.StateConnected}
	if got := log.states(); !slices.Equal(got, want) {
		t.Errorf("progress %v, want %v", got, want)
	}
	if a := log.addresses(); len(a) != 1 || !a[0].Equal(&ip) {
		t.Errorf("OnAddress calls %v, want one with %v", a, ip)
	}
}

func TestSessionFailsWithAClearErrorForEveryKnob(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  simnet.MBIMConfig
		apn  string
		want error
		text string
	}{
		{"sim absent", onNetwork(simnet.NetworkConfig{SIMAbsent: true}), "internet", mbim.ErrSIMNotInserted, "SIM not inserted"},
		{"pin locked", onNetwork(simnet.NetworkConfig{PIN: "1234"}), "internet", mbim.ErrPINRequired, "PIN required"},
		{"hardware radio off", onNetwork(simnet.NetworkConfig{HardwareRadioOff: true}), "internet", mbim.ErrRadioOff, "radio off"},
		{"not registered", onNetwork(simnet.NetworkConfig{NotRegistered: true}), "internet", mbim.ErrNoService, "no service"},
		{"registration denied", onNetwork(simnet.NetworkConfig{RegisterDenied: true}), "internet", mbim.ErrNoService, "PLMN not allowed"},
		{"bad apn", onNetwork(simnet.NetworkConfig{APN: "internet"}), "nosuch.apn", mbim.ErrBadAPN, "bad APN"},
		{"connect rejected", onNetwork(simnet.NetworkConfig{ConnectReject: 33}), "internet", mbim.StatusFailure, "not subscribed"},
		{"bad credentials", onNetwork(simnet.NetworkConfig{User: "u", Password: "p"}), "internet", mbim.ErrBadCredentials, "invalid user name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _ := pipeRig(t, tc.cfg, mbim.Options{})
			s := mbim.NewSession(c, fastSession(tc.apn, nil))
			defer s.Close(context.Background())
			_, err := s.WaitUp(testCtx(t))
			if !errors.Is(err, tc.want) {
				t.Fatalf("WaitUp error %v, want errors.Is %v", err, tc.want)
			}
			t.Logf("%s: %v", tc.name, err)
			if !containsFold(err.Error(), tc.text) {
				t.Errorf("error %q does not say %q", err, tc.text)
			}
			if st, _ := s.State(); st != mbim.StateFailed {
				t.Errorf("state %v, want failed", st)
			}
		})
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func TestSessionEntersTheConfiguredPIN(t *testing.T) {
	c, f := pipeRig(t, onNetwork(simnet.NetworkConfig{PIN: "2468", RegisterDelay: 30 * time.Millisecond}), mbim.Options{})
	cfg := fastSession("internet", nil)
	cfg.PIN = "2468"
	s := mbim.NewSession(c, cfg)
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatalf("WaitUp: %v", err)
	}
	if !f.Active(0) {
		t.Error("the emulated modem has no active session 0")
	}
}

func TestSessionNeverRetriesARejectedPIN(t *testing.T) {
	c, _ := pipeRig(t, onNetwork(simnet.NetworkConfig{PIN: "2468"}), mbim.Options{})
	cfg := fastSession("internet", nil)
	cfg.PIN = "0000"
	s := mbim.NewSession(c, cfg)
	defer s.Close(context.Background())
	_, err := s.WaitUp(testCtx(t))
	if !errors.Is(err, mbim.ErrPINRequired) || !containsFold(err.Error(), "2 attempts left") {
		t.Fatalf("first attempt: %v, want PIN required with 2 attempts left", err)
	}
	time.Sleep(200 * time.Millisecond) // several retries
	pin, err := c.PIN(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if pin.RemainingAttempts != 2 {
		t.Errorf("%d PIN attempts left after retries, want 2 (the PIN was entered again)", pin.RemainingAttempts)
	}
}

func TestSessionWaitsForSlowRegistrationAndRadioOn(t *testing.T) {
	c, _ := pipeRig(t, onNetwork(simnet.NetworkConfig{RadioOff: true, NoAutoAttach: true, RegisterDelay: 100 * time.Millisecond}), mbim.Options{})
	cfg := fastSession("internet", nil)
	cfg.PollInterval = 5 * time.Second // the indication, not polling, must move it on
	cfg.RegisterTimeout = 10 * time.Second
	s := mbim.NewSession(c, cfg)
	defer s.Close(context.Background())
	start := time.Now()
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatalf("WaitUp: %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("bring-up took %v: the REGISTER_STATE indication did not wake the session", d)
	}
}

func TestSessionReconnectsAfterTheNetworkDetaches(t *testing.T) {
	c, f := pipeRig(t, simnet.MBIMConfig{}, mbim.Options{})
	log := newProgressLog()
	s := mbim.NewSession(c, fastSession("internet", log))
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatalf("WaitUp: %v", err)
	}
	f.Network().NetworkDetach(36)
	waitFor(t, 5*time.Second, "disconnect and reconnect", func() bool {
		st := log.states()
		i := slices.Index(st, mbim.StateDisconnected)
		return i >= 0 && slices.Contains(st[i:], mbim.StateConnected)
	})
	if !f.Active(0) {
		t.Error("no active context after the re-connect")
	}
	log.mu.Lock()
	var cause error
	for _, p := range log.steps {
		if p.State == mbim.StateDisconnected {
			cause = p.Err
		}
	}
	log.mu.Unlock()
	if !errors.Is(cause, mbim.ErrDetached) {
		t.Errorf("disconnect cause %v, want ErrDetached", cause)
	}
	a := log.addresses()
	if len(a) != 3 || a[0].IsZero() || !a[1].IsZero() || a[2].IsZero() {
		t.Errorf("addresses reported %v, want up, down (zero), up", a)
	}
}

func TestSessionReconnectsAfterLosingTheNetwork(t *testing.T) {
	c, f := pipeRig(t, onNetwork(simnet.NetworkConfig{RegisterDelay: 50 * time.Millisecond}), mbim.Options{})
	log := newProgressLog()
	s := mbim.NewSession(c, fastSession("internet", log))
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatalf("WaitUp: %v", err)
	}
	f.Network().NetworkLost()
	waitFor(t, 5*time.Second, "reconnect", func() bool {
		st := log.states()
		i := slices.Index(st, mbim.StateDisconnected)
		return i >= 0 && slices.Contains(st[i:], mbim.StateConnected)
	})
}

func TestSessionReportsAddressChangesAndLateIPv6(t *testing.T) {
	c, f := pipeRig(t, simnet.MBIMConfig{IPv6Delay: 50 * time.Millisecond}, mbim.Options{})
	log := newProgressLog()
	s := mbim.NewSession(c, fastSession("internet", log))
	defer s.Close(context.Background())
	ip, err := s.WaitUp(testCtx(t))
	if err != nil {
		t.Fatalf("WaitUp: %v", err)
	}
	if len(ip.IPv4) != 1 || len(ip.IPv6) != 0 {
		t.Fatalf("first configuration %v, want IPv4 only (IPv6 comes later)", ip)
	}
	waitFor(t, 5*time.Second, "the late IPv6 configuration", func() bool {
		a := log.addresses()
		return len(a) >= 2 && len(a[len(a)-1].IPv6) == 1
	})
	car := simnet.DefaultCarrier()
	car.IPv4 = netip.MustParsePrefix("10.9.8.7/30")
	f.Network().SetCarrier(car)
	waitFor(t, 5*time.Second, "the new IPv4 address", func() bool {
		a := log.addresses()
		return len(a) >= 3 && len(a[len(a)-1].IPv4) == 1 && a[len(a)-1].IPv4[0] == car.IPv4
	})
	if got := s.IPConfig(); got.IPv4[0] != car.IPv4 {
		t.Errorf("IPConfig() %v, want %v", got, car.IPv4)
	}
}

func TestSessionCloseDeactivatesTheContext(t *testing.T) {
	c, f := pipeRig(t, simnet.MBIMConfig{}, mbim.Options{})
	s := mbim.NewSession(c, fastSession("internet", nil))
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatalf("WaitUp: %v", err)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if f.Active(0) {
		t.Error("context still active after Close")
	}
	if _, err := s.WaitUp(testCtx(t)); !errors.Is(err, mbim.ErrClosed) {
		t.Errorf("WaitUp after Close: %v, want ErrClosed", err)
	}
}

func TestSessionReportsATransportFailure(t *testing.T) {
	f := simnet.NewMBIMFunction(simnet.MBIMConfig{})
	a, b := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- f.Serve(b) }()
	c := mbim.NewClient(mbim.NewStreamTransport(a), mbim.Options{})
	defer c.Close()
	log := newProgressLog()
	s := mbim.NewSession(c, fastSession("internet", log))
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	b.Close() // the modem side goes away
	<-served
	waitFor(t, 5*time.Second, "the session to notice", func() bool {
		st, err := s.State()
		return st == mbim.StateFailed && err != nil
	})
}

func TestSessionComesUpWithEveryRecoverableKnob(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  simnet.MBIMConfig
		pin  string
	}{
		{"radio off", onNetwork(simnet.NetworkConfig{RadioOff: true}), ""},
		{"pin locked, pin configured", onNetwork(simnet.NetworkConfig{PIN: "1111"}), "1111"},
		{"slow registration", onNetwork(simnet.NetworkConfig{RegisterDelay: 50 * time.Millisecond}), ""},
		{"no auto attach", onNetwork(simnet.NetworkConfig{NoAutoAttach: true}), ""},
		{"slow answers", simnet.MBIMConfig{Delay: 5 * time.Millisecond}, ""},
		{"forced fragmentation", simnet.MBIMConfig{Fragment: 64}, ""},
		{"unsolicited indications", simnet.MBIMConfig{SignalInterval: time.Millisecond}, ""},
		{"stuck open from a previous host", simnet.MBIMConfig{IgnoreOpenUntilClose: true}, ""},
		{"late IPv6", simnet.MBIMConfig{IPv6Delay: 20 * time.Millisecond}, ""},
		{"IPv4-only carrier", onNetwork(simnet.NetworkConfig{Carrier: simnet.Carrier{IPv4: simnet.DefaultCarrier().IPv4, MTU: 1420}}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, f := pipeRig(t, tc.cfg, mbim.Options{OpenTimeout: 100 * time.Millisecond})
			cfg := fastSession("internet", nil)
			cfg.PIN = tc.pin
			s := mbim.NewSession(c, cfg)
			defer s.Close(context.Background())
			ip, err := s.WaitUp(testCtx(t))
			if err != nil {
				t.Fatalf("WaitUp: %v", err)
			}
			if len(ip.IPv4) != 1 || !f.Active(0) {
				t.Errorf("up with %v, modem session active %v", ip, f.Active(0))
			}
		})
	}
}
