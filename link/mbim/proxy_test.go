package mbim_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
)

var proxySeq atomic.Int32

// testProxy serves c on a socket name of its own, so that tests run in
// parallel with each other and with a real mbim-proxy.
func testProxy(t testing.TB, c *mbim.Client, opts mbim.ProxyOptions) *mbim.Proxy {
	t.Helper()
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("mhistack-test-%d-%d", os.Getpid(), proxySeq.Add(1))
	}
	p, err := mbim.ListenProxy(c, opts)
	if err != nil {
		t.Fatalf("ListenProxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dialProxy(t testing.TB, p *mbim.Proxy) *mbim.Client {
	t.Helper()
	c, err := mbim.DialProxy(testCtx(t), p.Name(), "/dev/wwan0mbim0", mbim.Options{})
	if err != nil {
		t.Fatalf("DialProxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestProxyForwardsClientsCommandsWithTheirOwnTransactionIDs(t *testing.T) {
	host, f := openPipe(t, simnet.MBIMConfig{Delay: 2 * time.Millisecond}, mbim.Options{})
	p := testProxy(t, host, mbim.ProxyOptions{})
	var wg sync.WaitGroup
	for i := range 3 {
		c := dialProxy(t, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each client's TIDs start at 1 and collide with the
			// others'; the proxy must keep them apart.
			for range 5 {
				caps, err := c.DeviceCaps(testCtx(t))
				if err != nil || caps.DeviceID == "" {
					t.Errorf("client %d DeviceCaps = %+v, %v", i, caps, err)
					return
				}
				rs, err := c.RegisterState(testCtx(t))
				if err != nil || rs.State != mbim.RegisterHome {
					t.Errorf("client %d RegisterState = %+v, %v", i, rs, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s := f.Stats(); s.Commands < 30 {
		t.Errorf("the modem saw %d commands, want at least 30", s.Commands)
	}
	waitFor(t, 5*time.Second, "three clients", func() bool { return p.Clients() == 3 })
}

func TestProxyAnswersOpenAndCloseLocallySoTheHostSessionSurvives(t *testing.T) {
	host, f := pipeRig(t, simnet.MBIMConfig{}, mbim.Options{})
	s := mbim.NewSession(host, fastSession("internet", nil))
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	p := testProxy(t, host, mbim.ProxyOptions{})
	c := dialProxy(t, p)
	cs, err := c.ConnectState(testCtx(t), 0)
	if err != nil || cs.ActivationState != mbim.ActivationActivated {
		t.Fatalf("ConnectState through the proxy = %+v, %v", cs, err)
	}
	if err := c.Close(); err != nil { // sends CLOSE
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "client gone", func() bool { return p.Clients() == 0 })
	if !f.Opened() || !f.Active(0) {
		t.Error("a proxy client's CLOSE reached the modem")
	}
	if st, _ := s.State(); st != mbim.StateConnected {
		t.Errorf("host session %v after the client closed", st)
	}
}

func TestProxyFansOutIndicationsToSubscribedClients(t *testing.T) {
	host, f := openPipe(t, simnet.MBIMConfig{}, mbim.Options{})
	p := testProxy(t, host, mbim.ProxyOptions{})
	std := dialProxy(t, p) // the standard list includes SIGNAL_STATE
	narrow := dialProxy(t, p)
	if _, err := narrow.SubscribeIndications(testCtx(t), []mbim.EventSubscription{{Service: mbim.ServiceBasicConnect,
		CIDs: []uint32{mbim.CIDConnect}}}); err != nil {
		t.Fatal(err)
	}
	var gotStd, gotNarrow atomic.Int32
	defer std.Subscribe(func(m *mbim.Message) {
		if m.CID == mbim.CIDSignalState {
			gotStd.Add(1)
		}
	})()
	defer narrow.Subscribe(func(m *mbim.Message) {
		if m.CID == mbim.CIDSignalState {
			gotNarrow.Add(1)
		}
	})()
	f.Network().SetSignal(12)
	waitFor(t, 5*time.Second, "the indication at the standard client", func() bool { return gotStd.Load() == 1 })
	time.Sleep(50 * time.Millisecond)
	if n := gotNarrow.Load(); n != 0 {
		t.Errorf("client subscribed to CONNECT only got %d SIGNAL_STATE indications", n)
	}
}

func TestProxyRefusesCommandsBeforeConfiguration(t *testing.T) {
	host, f := openPipe(t, simnet.MBIMConfig{}, mbim.Options{})
	p := testProxy(t, host, mbim.ProxyOptions{DevicePath: "/dev/wwan0mbim0"})
	conn, err := net.Dial("unix", "@"+p.Name())
	if err != nil {
		t.Fatal(err)
	}
	c := mbim.NewClient(mbim.NewStreamTransport(conn), mbim.Options{OpenAttempts: 1})
	defer c.Close()
	if err := c.Open(testCtx(t)); !errors.Is(err, mbim.StatusNotInitialized) {
		t.Errorf("OPEN before CONFIGURATION: %v, want not initialized", err)
	}
	if _, err := mbim.DialProxy(testCtx(t), p.Name(), "/dev/other", mbim.Options{}); !errors.Is(err, mbim.StatusFailure) {
		t.Errorf("CONFIGURATION with another device path: %v, want failure", err)
	}
	if s := f.Stats(); s.Commands != 0 {
		t.Errorf("%d commands reached the modem", s.Commands)
	}
}

// TestMbimcliThroughProxy runs Debian's unmodified mbimcli (libmbim-utils)
// through the proxy against the emulated modem on the MHI path, while
// mhistack's own session holds the data connection.
func TestMbimcliThroughProxy(t *testing.T) {
	mbimcli, err := exec.LookPath("mbimcli")
	if err != nil {
		if os.Getenv("MHISTACK_REQUIRE_MBIMCLI") == "1" {
			t.Fatalf("mbimcli not found (apt-get install libmbim-utils): %v", err)
		}
		t.Skip("mbimcli not installed (libmbim-utils); CI installs it and sets MHISTACK_REQUIRE_MBIMCLI=1")
	}
	r := newMHIRig(t, "quectel-rm5xx", onNetwork(simnet.NetworkConfig{DeviceID: "867929068000001", SubscriberID: "001019876543210"}))
	host := r.dial(mbim.Options{})
	s := mbim.NewSession(host, fastSession("internet", nil))
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// mbimcli knows only the default name, which is one per network
	// namespace: another run of this test on the machine may hold it for
	// a moment, a libmbim mbim-proxy (or ModemManager) for good.
	var p *mbim.Proxy
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if p, err = mbim.ListenProxy(host, mbim.ProxyOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cannot listen on @%s (is a libmbim mbim-proxy or ModemManager running?): %v", mbim.ProxySocket, err)
		}
	}
	defer p.Close()
	// libmbim wants the -d path to be a special file; a FIFO will do.
	dev := filepath.Join(t.TempDir(), "wwan0mbim0")
	if err := syscall.Mkfifo(dev, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, mbimcli, append([]string{"-d", dev, "-p"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("mbimcli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("mbimcli %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	expect := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("mbimcli output lacks %q", w)
			}
		}
	}
	expect(run("--query-device-caps"), "867929068000001", "MHISTACK.SIM.1.0")
	expect(run("--query-subscriber-ready-status"), "initialized", "001019876543210")
	expect(run("--query-registration-state"), "home", "00101")
	expect(run("--connect=apn=internet"), "10.0.0.2/30", "10.0.0.1", "10.0.0.53", "1500")
	// What else mbim-network and people type.
	expect(run("--query-device-services"), "basic-connect")
	expect(run("--query-pin-state"), "unlocked")
	expect(run("--query-radio-state"), "Software radio state: 'on'")
	expect(run("--query-packet-service-state"), "attached")
	// The host agreed MBIMEx 3.0 and the proxy told mbimcli so: it
	// reads the SIGNAL_STATE of 2.0 (which 3.0 keeps: the default cell,
	// LTE at -93 dBm, SNR 13 dB) and the 3.0 BASE_STATIONS_INFO's LTE
	// serving cell (B3's EARFCN 1300, PCI 101).
	expect(run("--query-signal-state"), "RSSI", "RSRP/SNR info: 'lte'", "RSRP: '-93 dBm'", "SNR: '13.0 dB'")
	expect(run("--ms-query-base-stations-info"), "EARFCN: 1300", "Physical cell id: 101", "RSRP: -93 dBm", "RSRQ: -9 dBm")
	// --device-open-ms-mbimex-v2 through the proxy: mbimcli's own
	// exchange agrees on the same version.
	expect(run("--device-open-ms-mbimex-v2", "--query-signal-state"), "RSRP: '-93 dBm'")
	expect(run("--query-registration-state"), "home", "00101")
	expect(run("--query-connection-state"), "activated")
	expect(run("--query-ip-configuration"), "2001:db8:64::2/64")
	if !r.f.Active(0) || !r.f.Opened() {
		t.Error("mbimcli's CLOSE reached the modem: the host session is gone")
	}
	if st, _ := s.State(); st != mbim.StateConnected {
		t.Errorf("host session %v after mbimcli", st)
	}
}

func TestProxyClientDisconnectIsAnnouncedAndTheSessionReconnects(t *testing.T) {
	host, f := pipeRig(t, simnet.MBIMConfig{}, mbim.Options{})
	log := newProgressLog()
	s := mbim.NewSession(host, fastSession("internet", log))
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	p := testProxy(t, host, mbim.ProxyOptions{})
	c := dialProxy(t, p)
	if _, err := c.Disconnect(testCtx(t), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the session to re-connect", func() bool {
		st := log.states()
		i := slices.Index(st, mbim.StateDisconnected)
		return i >= 0 && slices.Contains(st[i:], mbim.StateConnected) && f.Active(0)
	})
}
