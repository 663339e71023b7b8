package qmi_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rig runs the emulated modem's QMI function over a pipe and a client on
// the other end. A host protocol violation fails the test.
func rig(t *testing.T, cfg simnet.QMIConfig) (*qmi.Client, *simnet.QMIFunction) {
	t.Helper()
	cfg.OnViolation = func(err error) { t.Errorf("modem saw a host violation: %v", err) }
	fn := simnet.NewQMIFunction(cfg)
	host, dev := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); fn.Serve(dev) }()
	c := qmi.NewClient(qmi.NewStreamTransport(host), qmi.Options{})
	t.Cleanup(func() { c.Close(); <-done })
	return c, fn
}

type progressLog struct {
	mu sync.Mutex
	p  []qmi.Progress
}

func (l *progressLog) add(p qmi.Progress) { l.mu.Lock(); l.p = append(l.p, p); l.mu.Unlock() }
func (l *progressLog) states() []qmi.SessionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s []qmi.SessionState
	for _, p := range l.p {
		s = append(s, p.State)
	}
	return s
}

func fast(cfg qmi.SessionConfig, l *progressLog) qmi.SessionConfig {
	cfg.PollInterval, cfg.RetryInterval = 5*time.Millisecond, 10*time.Millisecond
	cfg.SIMTimeout, cfg.RegisterTimeout, cfg.ConfigTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	if l != nil {
		cfg.OnProgress = l.add
	}
	return cfg
}

// TestSessionBringsUpDualStackOverQMAPv5: the libqmi/ModemManager order
// against the emulated modem gives the carrier's addresses for both
// families and the QMAPv5 data format the modem agreed to, with its UL
// limits.
func TestSessionBringsUpDualStackOverQMAPv5(t *testing.T) {
	c, fn := rig(t, simnet.QMIConfig{})
	log := &progressLog{}
	s := qmi.NewSession(c, fast(qmi.SessionConfig{APN: "internet"}, log))
	defer s.Close(context.Background())
	ip, err := s.WaitUp(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	car := simnet.DefaultCarrier()
	if !slices.Equal(ip.IPv4, []netip.Prefix{car.IPv4}) || !slices.Equal(ip.IPv6, []netip.Prefix{car.IPv6}) ||
		ip.IPv4Gateway != car.IPv4Gateway || ip.IPv6Gateway != car.IPv6Gateway ||
		!slices.Equal(ip.IPv4DNS, car.IPv4DNS) || !slices.Equal(ip.IPv6DNS, car.IPv6DNS) || ip.IPv4MTU != 1500 || ip.IPv6MTU != 1500 {
		t.Errorf("IP configuration %+v, want the carrier's %+v", ip, car)
	}
	df := s.DataFormat()
	if df.DLAggregation != qmi.AggregationQMAPv5 || df.ULAggregation != qmi.AggregationQMAPv5 || df.DLMaxDatagrams != 32 ||
		df.DLMaxSize != 32768 || df.ULMaxDatagrams != 11 || df.ULMaxSize != 8192 || df.LinkLayer != qmi.LinkLayerRawIP {
		t.Errorf("data format %+v", df)
	}
	if fn.DataFormat() != df {
		t.Errorf("modem agreed %+v, session kept %+v", fn.DataFormat(), df)
	}
	if fn.Calls() != 2 {
		t.Errorf("modem has %d calls, want 2 (IPv4, IPv6)", fn.Calls())
	}
	want := []qmi.SessionState{qmi.StateWaitingSIM, qmi.StateRegistering, qmi.StateDataFormat, qmi.StateConnecting,
		qmi.StateConfiguring, qmi.StateConnected}
	if got := log.states(); !slices.Equal(got, want) {
		t.Errorf("progress %v, want %v", got, want)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if fn.Calls() != 0 {
		t.Errorf("after Close the modem still has %d calls", fn.Calls())
	}
}

// TestSessionTakesQMAPv1FromAV1OnlyModem: a modem that answers QMAP to a
// QMAPv5 request sets the data path to MAPv1.
func TestSessionTakesQMAPv1FromAV1OnlyModem(t *testing.T) {
	c, _ := rig(t, simnet.QMIConfig{MaxAggregation: qmi.AggregationQMAP})
	s := qmi.NewSession(c, fast(qmi.SessionConfig{}, nil))
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if df := s.DataFormat(); df.DLAggregation.QMAPVersion() != 1 || df.ULAggregation != qmi.AggregationQMAP {
		t.Fatalf("data format %+v, want QMAP v1", df)
	}
}

// TestSessionErrors: the knobs of the shared network fail the session
// with errors that say why and wrap the QMI code; a refused call is a
// *qmi.CallError with the network's 3GPP cause.
func TestSessionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		net  simnet.NetworkConfig
		cfg  qmi.SessionConfig
		want error
		text string
		// cause is the 3GPP cause of a refused call, 0 for an error
		// before the call.
		cause int
	}{
		{"bad APN", simnet.NetworkConfig{APN: "internet"}, qmi.SessionConfig{APN: "nosuch", Families: []qmi.IPFamily{qmi.IPv4}}, qmi.ErrCallFailed, "3GPP cause 27", 27},
		{"bad credentials", simnet.NetworkConfig{User: "u", Password: "p"}, qmi.SessionConfig{Families: []qmi.IPFamily{qmi.IPv4}}, qmi.ErrCallFailed, "3GPP cause 29", 29},
		{"sim absent", simnet.NetworkConfig{SIMAbsent: true}, qmi.SessionConfig{}, qmi.ErrSIM, "no SIM card", 0},
		{"pin locked, none configured", simnet.NetworkConfig{PIN: "1234"}, qmi.SessionConfig{}, qmi.ErrSIM, "no PIN configured", 0},
		{"wrong pin", simnet.NetworkConfig{PIN: "1234"}, qmi.SessionConfig{PIN: "0000"}, qmi.ErrIncorrectPIN, "2 attempts left", 0},
		{"not registered", simnet.NetworkConfig{NotRegistered: true}, qmi.SessionConfig{RegisterTimeout: 50 * time.Millisecond}, qmi.ErrNoService, "searching", 0},
		{"denied", simnet.NetworkConfig{RegisterDenied: true}, qmi.SessionConfig{}, qmi.ErrNoService, "denied", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := rig(t, simnet.QMIConfig{Network: simnet.NewNetwork(tc.net)})
			cfg := fast(tc.cfg, nil)
			if tc.cfg.RegisterTimeout != 0 {
				cfg.RegisterTimeout = tc.cfg.RegisterTimeout
			}
			s := qmi.NewSession(c, cfg)
			defer s.Close(context.Background())
			_, err := s.WaitUp(testCtx(t))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("WaitUp error %v, want %v containing %q", err, tc.want, tc.text)
			}
			var ce *qmi.CallError
			if errors.As(err, &ce) != (tc.cause != 0) {
				t.Fatalf("WaitUp error %v: *qmi.CallError %v, want one: %v", err, ce != nil, tc.cause != 0)
			}
			if ce == nil {
				return
			}
			if cause, ok := ce.End.Cause3GPP(); !ok || cause != tc.cause || ce.Family != qmi.IPv4 {
				t.Errorf("call end %v of the IPv%d call, want 3GPP cause %d of the IPv4 call", ce.End, ce.Family, tc.cause)
			}
		})
	}
}

// TestSessionEntersPINAndSharesTheSIMWithMBIM: the PIN entered over QMI
// unlocks the SIM of the modem's MBIM function too (one SIM).
func TestSessionEntersPINAndSharesTheSIMWithMBIM(t *testing.T) {
	network := simnet.NewNetwork(simnet.NetworkConfig{PIN: "1234"})
	fn := simnet.NewMBIMFunction(simnet.MBIMConfig{Network: network})
	// Both functions of the modem run (a function's start is a modem
	// restart, so the MBIM one starts first, as both do at power-up).
	host, dev := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); fn.Serve(dev) }()
	mc := mbim.NewClient(mbim.NewStreamTransport(host), mbim.Options{})
	defer func() { mc.Close(); <-done }()
	if err := mc.Open(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if rs, err := mc.SubscriberReadyStatus(testCtx(t)); err != nil || rs.ReadyState != mbim.ReadyDeviceLocked {
		t.Fatalf("MBIM ready state before the PIN %v, %v", rs.ReadyState, err)
	}
	c, _ := rig(t, simnet.QMIConfig{Network: network})
	s := qmi.NewSession(c, fast(qmi.SessionConfig{PIN: "1234"}, nil))
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	rs, err := mc.SubscriberReadyStatus(testCtx(t))
	if err != nil || rs.ReadyState != mbim.ReadyInitialized {
		t.Fatalf("MBIM ready state %v, %v; want initialized after the QMI PIN", rs.ReadyState, err)
	}
}

// TestSessionReconnectsAfterNetworkDetach: the network ending the call
// (Packet Service Status indication) takes the session down, reports a
// zero configuration, and the session connects again.
func TestSessionReconnectsAfterNetworkDetach(t *testing.T) {
	c, fn := rig(t, simnet.QMIConfig{})
	var mu sync.Mutex
	var addrs []qmi.IPConfig
	cfg := fast(qmi.SessionConfig{}, nil)
	cfg.OnAddress = func(ip qmi.IPConfig) { mu.Lock(); addrs = append(addrs, ip); mu.Unlock() }
	lost := make(chan error, 4)
	cfg.OnProgress = func(p qmi.Progress) {
		if p.State == qmi.StateDisconnected {
			lost <- p.Err
		}
	}
	s := qmi.NewSession(c, cfg)
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	fn.Network().NetworkDetach(36)
	select {
	case err := <-lost:
		if !errors.Is(err, qmi.ErrDisconnect) {
			t.Fatalf("disconnect cause %v", err)
		}
	case <-testCtx(t).Done():
		t.Fatal("no disconnect reported")
	}
	// Attach again (the network re-registers) and wait for the session.
	fn.Network().Reregister()
	for {
		ip, err := s.WaitUp(testCtx(t))
		if err == nil {
			if len(ip.IPv4) == 0 {
				t.Fatalf("reconnected without an address: %+v", ip)
			}
			break
		}
		if testCtx(t).Err() != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	zero := 0
	for _, a := range addrs {
		if a.IsZero() {
			zero++
		}
	}
	if zero == 0 || len(addrs) < 3 {
		t.Fatalf("addresses reported %v: want up, zero, up", addrs)
	}
}

// TestClientMatchesTransactionsAndReportsErrors: concurrent requests on
// several clients each get their own answer; a request for a client ID
// the host does not hold fails with INVALID_CLIENT_ID; a timeout says
// which request.
func TestClientMatchesTransactionsAndReportsErrors(t *testing.T) {
	c, _ := rig(t, simnet.QMIConfig{})
	ctx := testCtx(t)
	vi, err := c.VersionInfo(ctx)
	if err != nil || len(vi) < 6 {
		t.Fatalf("version info %v, %v", vi, err)
	}
	dms, err := c.AllocateCID(ctx, qmi.ServiceDMS)
	if err != nil {
		t.Fatal(err)
	}
	nas, err := c.AllocateCID(ctx, qmi.ServiceNAS)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				r, err := c.Service(qmi.ServiceDMS, dms).Do(ctx, qmi.NewRequest(qmi.ServiceDMS, qmi.DMSGetIDs))
				if err != nil || qmi.ParseIDs(r).IMEI == "" {
					errs <- errors.Join(err, errors.New("no IMEI"))
				}
				return
			}
			r, err := c.Service(qmi.ServiceNAS, nas).Do(ctx, qmi.NewRequest(qmi.ServiceNAS, qmi.NASGetServingSystem))
			if err != nil {
				errs <- err
				return
			}
			if ss, err := qmi.ParseServingSystem(r); err != nil || ss.Registration != qmi.Registered || ss.PLMN == nil || ss.PLMN.MCC != 1 {
				errs <- errors.Join(err, errors.New("serving system wrong"))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := c.ReleaseCID(ctx, qmi.ClientID{Service: qmi.ServiceDMS, Client: dms}); err != nil {
		t.Fatal(err)
	}
	// Timeouts name the request.
	short, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-short.Done()
	if _, err := c.VersionInfo(short); err == nil {
		t.Fatal("request with an expired context succeeded")
	}
}

// TestModemReportsHostViolations: the emulated modem refuses what a
// correct host never sends, and reports it as a violation.
func TestModemReportsHostViolations(t *testing.T) {
	var mu sync.Mutex
	var got []string
	fn := simnet.NewQMIFunction(simnet.QMIConfig{OnViolation: func(err error) { mu.Lock(); got = append(got, err.Error()); mu.Unlock() }})
	host, dev := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); fn.Serve(dev) }()
	c := qmi.NewClient(qmi.NewStreamTransport(host), qmi.Options{})
	defer func() { c.Close(); <-done }()
	ctx := testCtx(t)
	// A request for a client ID never allocated.
	_, err := c.Service(qmi.ServiceWDS, 9).Do(ctx, qmi.NewRequest(qmi.ServiceWDS, qmi.WDSGetPacketServiceStatus))
	if !errors.Is(err, qmi.ErrInvalidClientID) {
		t.Fatalf("unallocated client: %v", err)
	}
	// Bind Mux Data Port without its mandatory mux ID.
	wds, err := c.AllocateCID(ctx, qmi.ServiceWDS)
	if err != nil {
		t.Fatal(err)
	}
	m := qmi.NewRequest(qmi.ServiceWDS, qmi.WDSBindMuxDataPort).Add(0x10, make([]byte, 8))
	if _, err := c.Service(qmi.ServiceWDS, wds).Do(ctx, m); !errors.Is(err, qmi.ErrMissingArgument) {
		t.Fatalf("bind mux without mux ID: %v", err)
	}
	// A Set IP Family with a 2-byte family.
	m = qmi.NewRequest(qmi.ServiceWDS, qmi.WDSSetIPFamily).Add(0x01, []byte{4, 0})
	if _, err := c.Service(qmi.ServiceWDS, wds).Do(ctx, m); !errors.Is(err, qmi.ErrMalformedMessage) {
		t.Fatalf("malformed IP family: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || !strings.Contains(got[0], "does not hold") || !strings.Contains(got[1], "mux ID") || !strings.Contains(got[2], "trailing") {
		t.Fatalf("violations %q", got)
	}
}
