package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
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
		fns, err := serveFunctions(p, set, 0, simnet.NTBQuirks{}, log)
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
	if _, err := serveFunctions(p, functionFlag{"QMI": "qmi"}, 0, simnet.NTBQuirks{}, log); err == nil {
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
