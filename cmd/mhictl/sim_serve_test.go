package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/nmea"
	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// A served modem runs the QMI function on its QMI pair, sharing the MBIM
// function's network when the profile has both (qcom v1), with a network
// of its own on a QMI-only modem, and none when -function says so.
func TestServeFunctionsPutQMIOnTheQMIPair(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	build := func(profile string, set functionFlag) *servedFunctions {
		t.Helper()
		p, ok := mhi.Lookup(profile)
		if !ok {
			t.Fatalf("no profile %s", profile)
		}
		fns, err := serveFunctions(p, set, simnet.NetworkConfig{}, simnet.CarrierOptions{}, log)
		if err != nil {
			t.Fatalf("%s: %v", profile, err)
		}
		t.Cleanup(fns.close)
		return fns
	}

	both := build("qcom-sdx55m", functionFlag{"IP_HW0": "carrier"})
	if both.qmi == nil || both.mbim == nil {
		t.Fatalf("qcom-sdx55m: qmi %v, mbim %v: want both control functions", both.qmi, both.mbim)
	}
	if both.all["QMI"] != sim.Function(both.qmi) || both.all["MBIM"] != sim.Function(both.mbim) {
		t.Errorf("qcom-sdx55m: functions %v: QMI and MBIM not on their pairs", both.all)
	}
	if both.qmi.Network() != both.mbim.Network() {
		t.Error("qcom-sdx55m: the QMI and MBIM functions have networks of their own, want one shared")
	}
	if _, ok := both.all["IP_HW0"].(*simnet.CarrierNetwork); !ok {
		t.Errorf("IP_HW0 runs %T, want the carrier network asked for", both.all["IP_HW0"])
	}
	if _, ok := both.all["IP_SW0"].(*simnet.ICMPResponder); !ok {
		t.Errorf("IP_SW0 runs %T, want the default ICMP responder", both.all["IP_SW0"])
	}

	only := build("telit-fn980-hwv1", functionFlag{})
	if only.qmi == nil || only.mbim != nil || only.qmi.Network() == nil {
		t.Errorf("telit-fn980-hwv1 (QMI only): qmi %v, mbim %v", only.qmi, only.mbim)
	}

	none := build("qcom-sdx55m", functionFlag{"QMI": "none"})
	if none.qmi != nil || none.all["QMI"] != nil {
		t.Errorf("-function QMI=none: QMI runs %v", none.all["QMI"])
	}
	if none.mbim == nil {
		t.Error("-function QMI=none dropped the MBIM function")
	}

	noMBIM := build("quectel-em1xx", functionFlag{})
	if noMBIM.qmi != nil {
		t.Error("quectel-em1xx has no QMI pair, but a QMI function runs")
	}

	p, _ := mhi.Lookup("quectel-em1xx")
	if _, err := serveFunctions(p, functionFlag{"QMI": "qmi"}, simnet.NetworkConfig{}, simnet.CarrierOptions{}, log); err == nil {
		t.Error("-function QMI=qmi on a profile without a QMI pair: no error")
	}
}

// TestServeQuirkList: -quirk list prints the registry (with the models
// that have each quirk) and exits without serving; an unknown quirk is a
// usage error.
func TestServeQuirkList(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"sim", "serve", "-quirk", "list"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"slow-ready", "no-inband-wake", "one-msi", "quectel-em1xx", "drivers/bus/mhi/host/pci_generic.c"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"sim", "serve", "-socket", t.TempDir() + "/s", "-quirk", "bogus"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "bogus") {
		t.Errorf("-quirk bogus: exit %d, stderr %q; want a usage error naming it", code, errb.String())
	}
}

// TestProgressShowsLongReadyWaits: a power-up wait still running is one
// line with what it waits for, how long so far and its bound.
func TestProgressShowsLongReadyWaits(t *testing.T) {
	var out bytes.Buffer
	waitProgress(&out).OnProgress(mhi.Progress{Phase: mhi.PhaseReady, Waiting: "READY", Waited: 6 * time.Second, Limit: 50 * time.Second})
	if want := "READY: still waiting for READY: 6s of 50s\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}

// TestServeRadio: -radio list prints the presets with their sources, an
// unknown preset is a usage error, and a preset reaches the carrier
// networks serveFunctions builds (the host's UL packets enter its model).
func TestServeRadio(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"sim", "serve", "-radio", "list"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"lte", "nr-sa", "nr-mmwave", "congested-cell", "handover-train", "source: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	errb.Reset()
	if code := run(context.Background(), []string{"sim", "serve", "-socket", t.TempDir() + "/s", "-radio", "bogus"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "bogus") {
		t.Errorf("-radio bogus: exit %d, stderr %q; want a usage error naming it", code, errb.String())
	}
	p, _ := mhi.Lookup("qcom-sdx55m")
	cfg, err := radio.Preset("lte")
	if err != nil {
		t.Fatal(err)
	}
	fns, err := serveFunctions(p, functionFlag{"IP_HW0": "carrier"}, simnet.NetworkConfig{}, simnet.CarrierOptions{Radio: &cfg}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer fns.close()
	cn := fns.carriers["IP_HW0"]
	ip := make([]byte, 20)
	ip[0] = 0x45
	cn.Receive(ip)
	if st := cn.Stats(); st.RadioUp.Enqueued != 1 {
		t.Errorf("radio up stats %+v, want the packet enqueued", st.RadioUp)
	}
}

// TestSimServeFCCLockAndSIMPIN: sim serve -fcc-lock -sim-pin serves a
// T99W175 whose radio stays off until the host runs the unlock and whose
// SIM asks for the PIN; mhictl status over vfio-user reports each lock in
// turn, naming the flag that lifts it, and comes online with both. Without
// -fcc-lock the same profile serves unlocked, and -fcc-lock on a profile
// whose ID ships unlocked is a usage error.
func TestSimServeFCCLockAndSIMPIN(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	serve := func(args ...string) string { return simServeForTest(t, args...) }
	status := func(dev string, wantCode int, want *regexp.Regexp, args ...string) {
		t.Helper()
		var out bytes.Buffer
		code := run(context.Background(), append([]string{"status", "-device", dev}, args...), &out, &out)
		if code != wantCode || !want.MatchString(out.String()) {
			t.Errorf("status %q: exit %d, want %d and %v:\n%s", args, code, wantCode, want, out.String())
		}
	}
	t.Setenv(stack.PINEnv, "")
	locked := serve("-profile", "foxconn-t99w175", "-fcc-lock", "-sim-pin", "2580")
	status(locked, 1, regexp.MustCompile(`(?s)radio\s+fcc-locked.*-fcc-unlock`))
	status(locked, 1, regexp.MustCompile(`PIN required \(3 attempts left\).*-pin`), "-fcc-unlock")
	status(locked, 0, regexp.MustCompile(`radio\s+on`), "-fcc-unlock", "-pin", "2580")

	status(serve("-profile", "foxconn-t99w175"), 0, regexp.MustCompile(`radio\s+on`))

	var out bytes.Buffer
	if code := run(context.Background(), []string{"sim", "serve", "-socket", filepath.Join(t.TempDir(), "s"), "-fcc-lock"}, &out, &out); code != 2 ||
		!strings.Contains(out.String(), "does not ship FCC-locked") {
		t.Errorf("-fcc-lock on qcom-sdx55m: exit %d, want 2:\n%s", code, out.String())
	}
}

// simServeForTest runs mhictl sim serve with args until the test ends
// and returns its -device once its socket is there.
func simServeForTest(t *testing.T, args ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "modem.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb syncBuilder
	go func() {
		done <- run(ctx, append([]string{"sim", "serve", "-socket", path, "-log-level", "warn"}, args...), io.Discard, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("sim serve %q: exit %d: %s", args, code, errb.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return "vfio-user:" + path
		}
		if time.Now().After(deadline) {
			t.Fatalf("sim serve %q: no socket: %s", args, errb.String())
		}
	}
}

// mhictl sim serve puts the emulated AT port on the profile's DUN pair
// and the GNSS receiver on its NMEA pair: mhictl at and mhictl gnss over
// vfio-user get the answers and sentences they get with -device sim.
func TestSimServeAnswersATAndStreamsNMEA(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	dev := simServeForTest(t, "-profile", "quectel-em1xx")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"at", "-device", dev, "-profile", "quectel-em1xx", "AT+CSQ"}, &out, &errb); code != 0 {
		t.Fatalf("mhictl at: exit %d: %s", code, errb.String())
	}
	if out.String() != "+CSQ: 20,0\nOK\n" {
		t.Errorf("mhictl at AT+CSQ over vfio-user: %q", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"at", "-device", dev, "-profile", "quectel-em1xx", "AT+COPS?"}, &out, &errb); code != 0 ||
		out.String() != "+COPS: 0,0,\"mhistack\",7\nOK\n" {
		t.Errorf("mhictl at AT+COPS? over vfio-user: exit %d, %q %s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"gnss", "-device", dev, "-profile", "quectel-em1xx", "-n", "3"}, &out, &errb); code != 0 {
		t.Fatalf("mhictl gnss: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	types := map[string]bool{}
	for _, l := range lines {
		s, err := nmea.Parse(l)
		if err != nil {
			t.Errorf("%q: %v", l, err)
			continue
		}
		types[s.Type] = true
	}
	if len(lines) != 3 || !types["GGA"] {
		t.Errorf("mhictl gnss -n 3 over vfio-user: %q", out.String())
	}
}

// mhictl sim serve -refuse-pdn makes the network refuse data sessions:
// for good (33), mhictl status says so naming the cause; for two
// attempts (26), stack.Open over vfio-user backs off and gets online.
// The control socket's refuse-pdn and deactivate take the session down
// and keep it refused until refuse-pdn off. Bad values are usage errors.
func TestSimServeRefusePDN(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	var out bytes.Buffer
	code := run(context.Background(), []string{"status", "-device", simServeForTest(t, "-refuse-pdn", "33")}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "3GPP cause 33") || !strings.Contains(out.String(), "for good") {
		t.Errorf("status against -refuse-pdn 33: exit %d:\n%s", code, out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl := filepath.Join(t.TempDir(), "control.sock")
	st, err := stack.Open(ctx, stack.Options{Device: simServeForTest(t, "-refuse-pdn", "26:2", "-control", ctl), RetryInterval: 50 * time.Millisecond, FCCUnlock: true})
	if err != nil {
		t.Fatalf("stack.Open against -refuse-pdn 26:2: %v", err)
	}
	defer st.Close()
	if !st.LinkUp() {
		t.Error("stack.Open against -refuse-pdn 26:2: link down")
	}
	// At run time, over the control socket: the network deactivates
	// the session and refuses it until told otherwise.
	call := func(args ...string) {
		t.Helper()
		var b bytes.Buffer
		if code := run(context.Background(), append([]string{"sim", "control", "-socket", ctl}, args...), &b, &b); code != 0 || !strings.HasPrefix(b.String(), "ok") {
			t.Fatalf("sim control %q: exit %d: %s", args, code, b.String())
		}
	}
	wait := func(what string, match func(stack.Event) bool) {
		t.Helper()
		for {
			select {
			case e := <-st.Events():
				if match(e) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no %s event", what)
			}
		}
	}
	call("refuse-pdn", "26")
	call("deactivate", "26")
	wait("link-down", func(e stack.Event) bool { return e.Kind == stack.EventLinkDown })
	wait("refused attempt", func(e stack.Event) bool {
		c, ok := stack.RefusalCause(e.Err)
		return e.Kind == stack.EventSession && ok && c == 26
	})
	call("refuse-pdn", "off")
	wait("link-up", func(e stack.Event) bool { return e.Kind == stack.EventLinkUp })
	for _, bad := range [][]string{{"refuse-pdn"}, {"refuse-pdn", "0"}, {"deactivate", "x"}, {"deactivate", "0"}} {
		var b bytes.Buffer
		if code := run(context.Background(), append([]string{"sim", "control", "-socket", ctl}, bad...), &b, &b); code != 1 || !strings.Contains(b.String(), "usage") {
			t.Errorf("sim control %q: exit %d: %s", bad, code, b.String())
		}
	}
	for _, bad := range []string{"0", "x", "26:0", "26:-1s", "26:soon", "256"} {
		out.Reset()
		if code := run(context.Background(), []string{"sim", "serve", "-socket", filepath.Join(t.TempDir(), "s"), "-refuse-pdn", bad}, &out, &out); code != 2 {
			t.Errorf("-refuse-pdn %q: exit %d, want 2:\n%s", bad, code, out.String())
		}
	}
	var f refusalFlag
	for v, want := range map[string]refusalFlag{"26": {cause: 26}, "26:3": {cause: 26, calls: 3}, "38:30s": {cause: 38, d: 30 * time.Second}} {
		if err := f.Set(v); err != nil || f != want {
			t.Errorf("-refuse-pdn %q: %+v, %v; want %+v", v, f, err, want)
		}
	}
}

// FuzzRefusePDNFlag: any -refuse-pdn value is taken or refused without a
// panic, and a taken one names a cause and at most one positive limit,
// and prints back as a value that parses to the same.
func FuzzRefusePDNFlag(f *testing.F) {
	for _, s := range []string{"26", "33", "26:3", "38:30s", "0", "26:0", "256", "26:-1s", "26:x", ":", "26:3:4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var r refusalFlag
		if err := r.Set(v); err != nil {
			return
		}
		if r.cause == 0 || r.calls < 0 || r.d < 0 || (r.calls > 0 && r.d > 0) {
			t.Fatalf("%q: %+v", v, r)
		}
		var again refusalFlag
		if err := again.Set(r.String()); err != nil || again != r {
			t.Fatalf("%q: %+v prints as %q, which parses to %+v, %v", v, r, r.String(), again, err)
		}
	})
}

// The control socket's renumber moves the session's IPv6 prefix while
// the session stays up: the stack (over vfio-user) takes the new /64 from
// the network's Router Advertisement and drops the old address when the
// valid lifetime renumber gave it ends. A bad lifetime is a usage error.
func TestSimServeRenumber(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl := filepath.Join(t.TempDir(), "control.sock")
	st, err := stack.Open(ctx, stack.Options{Device: simServeForTest(t, "-profile", "quectel-em1xx", "-function", "IP_HW0_MBIM=carrier", "-control", ctl), FCCUnlock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var old netip.Addr
	for _, p := range st.Addresses() {
		if a := p.Addr(); a.Is6() && !a.IsLinkLocalUnicast() {
			old = a
		}
	}
	if !old.IsValid() {
		t.Fatalf("no IPv6 address: %v", st.Addresses())
	}
	for _, bad := range [][]string{{"renumber", "x"}, {"renumber", "-1s"}, {"renumber", "1s", "2s"}} {
		var b bytes.Buffer
		if code := run(ctx, append([]string{"sim", "control", "-socket", ctl}, bad...), &b, &b); code != 1 {
			t.Errorf("sim control %q: exit %d: %s", bad, code, b.String())
		}
	}
	var b bytes.Buffer
	if code := run(ctx, []string{"sim", "control", "-socket", ctl, "renumber", "2s"}, &b, &b); code != 0 || !strings.HasPrefix(b.String(), "ok renumber ") {
		t.Fatalf("sim control renumber 2s: exit %d: %s", code, b.String())
	}
	next, err := netip.ParsePrefix(strings.Fields(b.String())[2])
	if err != nil {
		t.Fatalf("renumber answered %q: %v", b.String(), err)
	}
	has := func(in func(netip.Addr) bool) bool {
		return slices.ContainsFunc(st.Addresses(), func(p netip.Prefix) bool { return in(p.Addr()) })
	}
	for !has(next.Contains) || has(func(a netip.Addr) bool { return a == old }) {
		select {
		case <-ctx.Done():
			t.Fatalf("addresses %v: want one in %v and %v gone", st.Addresses(), next, old)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
