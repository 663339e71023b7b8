package mbim_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
)

func TestClientQueriesEveryBasicConnectCIDOverMHI(t *testing.T) {
	for _, profile := range []string{"quectel-rm5xx", "foxconn-t99w175", "qcom-sdx55m"} {
		t.Run(profile, func(t *testing.T) {
			r := newMHIRig(t, profile, onNetwork(simnet.NetworkConfig{DeviceID: "123456789012345"}))
			c := r.dial(mbim.Options{})
			ctx := testCtx(t)
			caps, err := c.DeviceCaps(ctx)
			if err != nil || caps.DeviceID != "123456789012345" || caps.MaxSessions != 8 {
				t.Errorf("DeviceCaps = %+v, %v", caps, err)
			}
			ds, err := c.DeviceServices(ctx)
			if err != nil || len(ds.Services) != 2 || ds.Services[0].ID != mbim.ServiceBasicConnect ||
				!ds.Supports(mbim.ServiceMSBasicConnectExtensions, mbim.CIDMSVersion) {
				t.Errorf("DeviceServices = %+v, %v", ds, err)
			}
			rs, err := c.SubscriberReadyStatus(ctx)
			if err != nil || rs.ReadyState != mbim.ReadyInitialized || rs.SubscriberID == "" || len(rs.TelephoneNumbers) != 1 {
				t.Errorf("SubscriberReadyStatus = %+v, %v", rs, err)
			}
			pin, err := c.PIN(ctx)
			if err != nil || pin.Locked {
				t.Errorf("PIN = %+v, %v", pin, err)
			}
			radio, err := c.RadioState(ctx)
			if err != nil || !radio.HardwareOn || !radio.SoftwareOn {
				t.Errorf("RadioState = %+v, %v", radio, err)
			}
			reg, err := c.RegisterState(ctx)
			if err != nil || reg.State != mbim.RegisterHome || reg.ProviderID != "00101" {
				t.Errorf("RegisterState = %+v, %v", reg, err)
			}
			ps, err := c.PacketService(ctx)
			if err != nil || ps.State != mbim.PacketServiceAttached || ps.DownlinkSpeed == 0 {
				t.Errorf("PacketService = %+v, %v", ps, err)
			}
			sig, err := c.SignalState(ctx)
			if dbm, ok := sig.DBm(); err != nil || !ok || dbm != -73 {
				t.Errorf("SignalState = %+v, %v", sig, err)
			}
			cs, err := c.Connect(ctx, mbim.ConnectRequest{Activate: true, APN: "internet", IPType: mbim.IPTypeIPv4})
			if err != nil || cs.ActivationState != mbim.ActivationActivated || cs.IPType != mbim.IPTypeIPv4 {
				t.Errorf("Connect = %+v, %v", cs, err)
			}
			ip, err := c.IPConfiguration(ctx, 0)
			if err != nil || len(ip.IPv4) != 1 || len(ip.IPv6) != 0 || ip.IPv4MTU != 1500 {
				t.Errorf("IPConfiguration = %v, %v", ip, err)
			}
			cs, err = c.Disconnect(ctx, 0)
			if err != nil || cs.ActivationState != mbim.ActivationDeactivated {
				t.Errorf("Disconnect = %+v, %v", cs, err)
			}
			if _, err := c.IPConfiguration(ctx, 0); !errors.Is(err, mbim.StatusContextNotActivated) {
				t.Errorf("IPConfiguration after Disconnect: %v, want context not activated", err)
			}
			list := []mbim.EventSubscription{{Service: mbim.ServiceBasicConnect, CIDs: []uint32{mbim.CIDConnect}}}
			got, err := c.SubscribeIndications(ctx, list)
			if err != nil || len(got) != 1 || len(got[0].CIDs) != 1 {
				t.Errorf("SubscribeIndications = %+v, %v", got, err)
			}
		})
	}
}

func TestClientReassemblesForcedFragmentsAndFragmentsLargeRequests(t *testing.T) {
	// The function splits its answers at 64 bytes; the client splits a
	// CONNECT with a long APN at 128 bytes.
	r := newMHIRig(t, "quectel-rm5xx", simnet.MBIMConfig{Fragment: 64, Network: simnet.NewNetwork(simnet.NetworkConfig{APN: strings.Repeat("a", 90)})})
	c := r.dial(mbim.Options{MaxControlTransfer: 128})
	ctx := testCtx(t)
	caps, err := c.DeviceCaps(ctx)
	if err != nil || caps.FirmwareInfo != "MHISTACK.SIM.1.0" {
		t.Fatalf("DeviceCaps over 64-byte fragments = %+v, %v", caps, err)
	}
	cs, err := c.Connect(ctx, mbim.ConnectRequest{Activate: true, APN: strings.Repeat("a", 90), User: "user", Password: "pw"})
	if err != nil || cs.ActivationState != mbim.ActivationActivated {
		t.Fatalf("Connect with a fragmented request = %+v, %v", cs, err)
	}
	ip, err := c.IPConfiguration(ctx, 0)
	if err != nil || len(ip.IPv6) != 1 || len(ip.IPv6DNS) != 1 {
		t.Fatalf("IPConfiguration over fragments = %v, %v", ip, err)
	}
	if s := r.f.Stats(); s.Malformed != 0 || s.FunctionErrors != 0 {
		t.Errorf("function stats %+v", s)
	}
}

func TestClientRetriesOpenWithCloseFirst(t *testing.T) {
	c, f := pipeRig(t, simnet.MBIMConfig{IgnoreOpenUntilClose: true}, mbim.Options{OpenTimeout: 50 * time.Millisecond})
	if err := c.Open(testCtx(t)); err != nil {
		t.Fatalf("Open: %v", err)
	}
	if !f.Opened() || !c.Opened() {
		t.Error("not opened")
	}
}

func TestClientOpenGivesUpAfterTheAttempts(t *testing.T) {
	// A function that never answers: OPEN times out each time.
	a, b := net.Pipe()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := b.Read(buf); err != nil {
				return
			}
		}
	}()
	defer b.Close()
	c := mbim.NewClient(mbim.NewStreamTransport(a), mbim.Options{OpenTimeout: 20 * time.Millisecond, OpenAttempts: 2})
	defer c.Close()
	err := c.Open(testCtx(t))
	if !errors.Is(err, mbim.ErrTimeout) {
		t.Fatalf("Open: %v, want ErrTimeout", err)
	}
}

func TestClientCommandBeforeOpenFailsAndFunctionErrorIsReported(t *testing.T) {
	c, _ := pipeRig(t, simnet.MBIMConfig{}, mbim.Options{})
	ctx := testCtx(t)
	if _, err := c.DeviceCaps(ctx); !errors.Is(err, mbim.ErrNotOpened) {
		t.Errorf("DeviceCaps before Open: %v, want ErrNotOpened", err)
	}
	if err := c.Open(ctx); err != nil {
		t.Fatal(err)
	}
	// Close the function behind the client's back: the next command
	// meets FUNCTION_ERROR NOT_OPENED, which the client turns into
	// ErrNotOpened and a reset notification.
	reset := make(chan struct{}, 1)
	defer c.OnReset(func() { reset <- struct{}{} })()
	if err := c.CloseFunction(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, &mbim.Message{Type: mbim.TypeCommand, Service: mbim.ServiceBasicConnect, CID: mbim.CIDDeviceCaps}); !errors.Is(err, mbim.ErrNotOpened) {
		t.Errorf("command on a closed client: %v", err)
	}
}

func TestClientMapsFunctionErrorToItsTransaction(t *testing.T) {
	// A raw function that answers every COMMAND with FUNCTION_ERROR
	// NOT_OPENED and every OPEN with OPEN_DONE.
	a, b := net.Pipe()
	go func() {
		var dec mbim.Decoder
		buf := make([]byte, 4096)
		for {
			n, err := b.Read(buf)
			if err != nil {
				return
			}
			dec.Write(buf[:n])
			for {
				m, err := dec.Next()
				if err != nil || m == nil {
					break
				}
				ans := &mbim.Message{Type: mbim.TypeOpenDone, TID: m.TID}
				if m.Type == mbim.TypeCommand {
					ans = &mbim.Message{Type: mbim.TypeFunctionError, TID: m.TID, Error: mbim.ProtoNotOpened}
				}
				b.Write(ans.Encode())
			}
		}
	}()
	defer b.Close()
	c := mbim.NewClient(mbim.NewStreamTransport(a), mbim.Options{})
	defer c.Close()
	ctx := testCtx(t)
	if err := c.Open(ctx); err != nil {
		t.Fatal(err)
	}
	reset := make(chan struct{}, 1)
	defer c.OnReset(func() { reset <- struct{}{} })()
	_, err := c.DeviceCaps(ctx)
	var fe *mbim.FunctionError
	if !errors.As(err, &fe) || fe.Code != mbim.ProtoNotOpened || !errors.Is(err, mbim.ErrNotOpened) {
		t.Fatalf("DeviceCaps: %v, want a NOT_OPENED function error", err)
	}
	select {
	case <-reset:
	case <-time.After(5 * time.Second):
		t.Fatal("no reset notification after NOT_OPENED")
	}
	if c.Opened() {
		t.Error("client still counts as opened")
	}
}

func TestClientRequestTimesOutOnSlowFunction(t *testing.T) {
	c, f := openPipe(t, simnet.MBIMConfig{}, mbim.Options{Timeout: 50 * time.Millisecond})
	f.Configure(func(cfg *simnet.MBIMConfig) { cfg.Delay = time.Second })
	start := time.Now()
	_, err := c.DeviceCaps(testCtx(t))
	if !errors.Is(err, mbim.ErrTimeout) {
		t.Fatalf("DeviceCaps on a slow function: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 800*time.Millisecond {
		t.Errorf("timed out after %v, want about 50ms", d)
	}
	// The late answer is dropped; the next request gets its own.
	f.Configure(func(cfg *simnet.MBIMConfig) { cfg.Delay = 0 })
	time.Sleep(time.Until(start.Add(1100 * time.Millisecond))) // the function is still busy with the first
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	if _, err := c.Call(ctx, &mbim.Message{Type: mbim.TypeCommand, Service: mbim.ServiceBasicConnect, CID: mbim.CIDRadioState}); err != nil {
		t.Errorf("next request: %v", err)
	}
}

func TestClientDispatchesUnsolicitedIndications(t *testing.T) {
	c, f := openPipe(t, simnet.MBIMConfig{SignalInterval: 10 * time.Millisecond}, mbim.Options{})
	got := make(chan mbim.SignalState, 16)
	defer c.Subscribe(func(m *mbim.Message) {
		if m.Service == mbim.ServiceBasicConnect && m.CID == mbim.CIDSignalState && m.TID == 0 {
			if s, err := mbim.ParseSignalState(m.Buffer); err == nil {
				select {
				case got <- s:
				default:
				}
			}
		}
	})()
	f.Network().SetSignal(7)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case s := <-got:
			if s.RSSI == 7 {
				return
			}
		case <-deadline:
			t.Fatal("no SIGNAL_STATE indication with RSSI 7")
		}
	}
}

func TestClientCloseFailsOutstandingRequests(t *testing.T) {
	c, f := openPipe(t, simnet.MBIMConfig{}, mbim.Options{})
	f.Configure(func(cfg *simnet.MBIMConfig) { cfg.Delay = 10 * time.Second })
	errc := make(chan error, 1)
	go func() {
		_, err := c.DeviceCaps(context.Background())
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	go c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, mbim.ErrClosed) {
			t.Errorf("outstanding request: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("outstanding request not failed by Close")
	}
}

func TestSessionOverMHIReconnectsAfterModemReset(t *testing.T) {
	r := newMHIRig(t, "quectel-rm5xx", onNetwork(simnet.NetworkConfig{RadioOff: true}))
	c := r.dial(mbim.Options{OpenTimeout: 300 * time.Millisecond, OpenAttempts: 10})
	log := newProgressLog()
	// An hour's retry: the attempts that fail while the modem restarts
	// must not wait for it (the reset ends the back-off).
	cfg := fastSession("internet", log)
	cfg.RetryInterval = time.Hour
	s := mbim.NewSession(c, cfg)
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatalf("WaitUp: %v", err)
	}
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "re-connect after SYS_ERR", func() bool {
		st := log.states()
		i := slices.Index(st, mbim.StateDisconnected)
		return i >= 0 && slices.Contains(st[i:], mbim.StateConnected) && r.f.Active(0)
	})
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, p := range log.steps {
		if p.State == mbim.StateDisconnected && !errors.Is(p.Err, mbim.ErrModemReset) {
			t.Errorf("disconnect cause %v, want ErrModemReset", p.Err)
		}
	}
}
