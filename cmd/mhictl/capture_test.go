package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// readPcap returns the packets of a pcap file, checking its link type.
func readPcap(t *testing.T, file string) [][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if lt := r.LinkType(); lt != layers.LinkTypeRaw && lt != layers.LinkType(101) {
		t.Errorf("link type %v, want raw IP", lt)
	}
	var pkts [][]byte
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if ci.CaptureLength != len(data) || ci.Length < ci.CaptureLength {
			t.Errorf("packet %d: capture info %+v for %d bytes", len(pkts), ci, len(data))
		}
		pkts = append(pkts, data)
	}
	return pkts
}

func TestCaptureWritesTheDataChannelWithTheRequestedPacketCount(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.pcap")
	var out, errb bytes.Buffer
	args := []string{"capture", "-o", file, "-ping", "198.18.0.1", "-ping-count", "3", "-ping-interval", "50ms", "-count", "6", "-duration", "30s"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "6 packets") || !strings.Contains(out.String(), "stopped by count") {
		t.Errorf("output %q", out.String())
	}
	pkts := readPcap(t, file)
	if len(pkts) != 6 {
		t.Fatalf("%d packets in the pcap, want 6", len(pkts))
	}
	var req, rep int
	for i, data := range pkts {
		p := gopacket.NewPacket(data, layers.LayerTypeIPv4, gopacket.Default)
		icmp, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		if icmp == nil {
			t.Errorf("packet %d is not ICMPv4: %v", i, p)
			continue
		}
		switch icmp.TypeCode.Type() {
		case layers.ICMPv4TypeEchoRequest:
			req++
		case layers.ICMPv4TypeEchoReply:
			rep++
		}
	}
	if req != 3 || rep != 3 {
		t.Errorf("%d echo requests and %d replies, want 3 and 3", req, rep)
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("MHISTACK_REQUIRE_TSHARK") == "1" {
			t.Fatalf("tshark not found (apt-get install tshark): %v", err)
		}
		t.Skip("tshark not installed: the capture was checked with pcapgo only; CI installs it and sets MHISTACK_REQUIRE_TSHARK=1")
	}
	b, err := exec.Command(tshark, "-r", file, "-T", "fields", "-e", "icmp.type").Output()
	if err != nil {
		t.Fatalf("tshark -r: %v", err)
	}
	if got := strings.Fields(string(b)); strings.Join(got, " ") != "8 0 8 0 8 0" {
		t.Errorf("tshark sees ICMP types %q, want 8 0 8 0 8 0", got)
	}
}

func TestCaptureStopsAfterDurationAndReportsJSON(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.pcap")
	var out, errb bytes.Buffer
	args := []string{"capture", "-o", file, "-ping", "198.18.0.1", "-ping-count", "2", "-ping-interval", "50ms", "-duration", "1s", "-json"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	var o captureOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	pkts := readPcap(t, file)
	if o.StoppedBy != "duration" || o.PingsOK != 2 || o.Packets < 4 || int(o.Packets) != len(pkts) {
		t.Errorf("-json %+v with %d packets in the file", o, len(pkts))
	}
}

func TestCaptureRunsUntilCancelledLikeSIGINT(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.pcap")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"capture", "-o", file, "-ping", "198.18.0.1", "-ping-count", "1000", "-ping-interval", "20ms"}, &out, &errb)
	}()
	time.Sleep(700 * time.Millisecond)
	cancel()
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(out.String(), "stopped by signal") {
			t.Fatalf("exit %d after cancel: %s %s", code, out.String(), errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("capture did not stop on cancel")
	}
	if n := len(readPcap(t, file)); n == 0 {
		t.Errorf("empty capture after cancel (output %q)", out.String())
	}
}

func TestCaptureFailsWithExitCode1WhenBringUpFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.pcap")
	var out bytes.Buffer
	if code := run(context.Background(), []string{"capture", "-o", file, "-sim-absent"}, &out, &out); code != 1 || !strings.Contains(out.String(), "insert a SIM") {
		t.Errorf("exit %d, output %q", code, out.String())
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("capture file created although bring-up failed: %v", err)
	}
}

func TestCaptureRejectsBadUsageWithExitCode2(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"capture"},
		{"capture", "-o", filepath.Join(dir, "x"), "extra"},
		{"capture", "-o", filepath.Join(dir, "x"), "-ping", "not-an-ip"},
		{"capture", "-o", filepath.Join(dir, "x"), "-duration", "-1s"},
		{"capture", "-o", filepath.Join(dir, "x"), "-count", "-3"},
		{"capture", "-o", filepath.Join(dir, "x"), "-ping", "198.18.0.1", "-ping-count", "0"},
		{"capture", "-o", filepath.Join(dir, "x"), "-profile", "nope"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), args, &out, &out); code != 2 {
			t.Errorf("mhictl %q: exit %d, want 2; output %q", args, code, out.String())
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"capture", "--help"}, &out, &out); code != 0 {
		t.Errorf("capture --help: exit %d", code)
	}
	for _, want := range []string{"usage: mhictl capture -o FILE", "-duration", "-count", "-ping", "198.18.0.1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("capture --help lacks %q:\n%s", want, out.String())
		}
	}
}
