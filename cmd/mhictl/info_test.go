package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vfiouser"
	"github.com/mhistack/mhistack/mhi/sim"
)

func TestInfoPowersUpTheEmulatedModemAndDescribesIt(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"info", "-device", "sim", "-profile", "quectel-em1xx"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"quectel-em1xx", "MHI version     1.0", "EE              AMSS", "state           M0", "IP_HW0_MBIM", "FIREHOSE", "hw-data"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("info output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"info", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("-json exit %d: %s", code, errb.String())
	}
	var o infoOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	if o.Profile != defaultSimProfile || o.EE != "AMSS" || !o.MissionMode || o.SerialNumber == "0x00000000" || len(o.Channels) == 0 || len(o.EventRings) == 0 {
		t.Errorf("-json: %+v", o)
	}
}

func TestModemCommandsRejectBadUsageWithExitCode2(t *testing.T) {
	for _, args := range [][]string{
		{"info", "-profile", "nope"},
		{"info", "-device", "not-an-address"},
		{"info", "-device", "vfio-user:"},
		{"info", "extra"},
		{"selftest", "-count", "0"},
		{"selftest", "-channel", "NOPE"},
		{"fw", "load"},
		{"fw", "load", "-image", "x", "-seg-len", "0"},
		{"edl", "-device", "0000:01:00.0"},
		{"list", "-bogus"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), args, &out, &out); code != 2 {
			t.Errorf("mhictl %q: exit %d, want 2; output %q", args, code, out.String())
		}
	}
	for _, name := range []string{"list", "info", "selftest", "fw load", "edl"} {
		var out bytes.Buffer
		args := append(strings.Fields(name), "--help")
		if code := run(context.Background(), args, &out, &out); code != 0 || !strings.Contains(out.String(), "usage: mhictl "+name) {
			t.Errorf("mhictl %s --help: exit %d, output %q", name, code, out.String())
		}
	}
}

func TestOpeningAMissingPCIDeviceFailsWithAHint(t *testing.T) {
	var out bytes.Buffer
	code := run(context.Background(), []string{"info", "-device", "0000:7f:1f.7"}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "mhictl list") {
		t.Errorf("exit %d, output %q; want 1 and a pointer to mhictl list", code, out.String())
	}
}

// TestInfoOnAVFIOUserServer drives the emulated modem behind a vfio-user
// server (as mhictl sim serve runs it) with -device vfio-user:PATH.
func TestInfoOnAVFIOUserServer(t *testing.T) {
	p, _ := mhi.Lookup("qcom-sdx55m")
	m, err := sim.New(p, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	path, stop := serveModem(t, m)
	defer stop()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"info", "-device", "vfio-user:" + path, "-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{`"qcom-sdx55m"`, `"AMSS"`, "vfio-user:" + path} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
}

// serveModem serves m over vfio-user on a socket in a temporary
// directory, as mhictl sim serve does; stop closes the server and waits
// for it.
func serveModem(t *testing.T, m *sim.Modem) (path string, stop func()) {
	t.Helper()
	srv, err := vfiouser.New(m)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "modem.sock")
	l, err := vfiouser.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	return path, func() {
		srv.Close()
		<-served
	}
}
