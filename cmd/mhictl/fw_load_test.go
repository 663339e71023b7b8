package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func writeImage(t *testing.T, n int) (string, []byte) {
	t.Helper()
	img := make([]byte, n)
	for i := range img {
		img[i] = byte(i*13 + i>>9)
	}
	path := filepath.Join(t.TempDir(), "sbl1.mbn")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, img
}

func TestFwLoadOverBHIWithPlainProgressLines(t *testing.T) {
	path, img := writeImage(t, 100000)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"fw", "load", "-image", path, "-profile", "qcom-sdx55m"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	sum := sha256.Sum256(img)
	for _, want := range []string{"BHI: 100000/100000 bytes staged", "BHI: 100000 bytes loaded, device acknowledged", "over BHI;", "EE AMSS", "received over BHI: sha256 " + hex.EncodeToString(sum[:])[:16]} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\r") {
		t.Errorf("plain output (not a terminal) contains carriage returns: %q", out.String())
	}
}

func TestFwLoadFullBootChainOverBHIeJSON(t *testing.T) {
	path, img := writeImage(t, 300000)
	var out, errb bytes.Buffer
	args := []string{"fw", "load", "-image", path, "-bhie", "-sbl-size", "8192", "-seg-len", "65536", "-json"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var o fwOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	sum := sha256.Sum256(img)
	sbl := sha256.Sum256(img[:8192])
	if o.Method != "BHI+BHIe" || o.EE != "AMSS" || !o.MissionMode || o.DeviceBHIeSHA256 != hex.EncodeToString(sum[:]) || o.DeviceBHISHA256 != hex.EncodeToString(sbl[:]) {
		t.Errorf("-json: %+v", o)
	}
	// Progress goes to stderr when stdout is JSON: a quarter-step line
	// per BHIe quarter, and the acknowledgements.
	if !strings.Contains(errb.String(), "BHIe: 300000 bytes loaded") || !strings.Contains(errb.String(), "BHI: 8192 bytes loaded") {
		t.Errorf("progress on stderr: %q", errb.String())
	}
}

func TestFwLoadProgressBar(t *testing.T) {
	path, _ := writeImage(t, 200000)
	var out, errb bytes.Buffer
	args := []string{"fw", "load", "-image", path, "-bhie", "-seg-len", "16384", "-progress", "bar"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "\r") || !strings.Contains(out.String(), "BHIe 100%") {
		t.Errorf("progress bar output %q", out.String())
	}
}

func TestFwLoadRefusesEmptyOrMissingImages(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o644)
	var out bytes.Buffer
	if code := run(context.Background(), []string{"fw", "load", "-image", empty}, &out, &out); code != 1 || !strings.Contains(out.String(), "empty") {
		t.Errorf("empty image: exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"fw", "load", "-image", filepath.Join(t.TempDir(), "missing")}, &out, &out); code != 1 {
		t.Errorf("missing image: exit %d, output %q", code, out.String())
	}
}

// TestFwLoadUnderAPseudoTerminalDrawsABar runs the built command under
// script(1), which gives it a pty: the auto mode must pick the bar.
func TestFwLoadUnderAPseudoTerminalDrawsABar(t *testing.T) {
	scriptPath, err := exec.LookPath("script")
	if err != nil {
		if os.Getenv("MHISTACK_REQUIRE_SCRIPT") == "1" {
			t.Fatalf("script(1) not found (apt-get install bsdutils): %v", err)
		}
		t.Skip("script(1) (bsdutils) is not installed; TestFwLoadProgressBar covers the bar in-process; CI sets MHISTACK_REQUIRE_SCRIPT=1")
	}
	bin := filepath.Join(t.TempDir(), "mhictl")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	path, _ := writeImage(t, 200000)
	cmd := exec.Command(scriptPath, "-qec", bin+" fw load -image "+path+" -bhie -seg-len 16384", "/dev/null")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("under a pty: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "BHIe 100%") || !strings.Contains(string(b), "\r") || !strings.Contains(string(b), "over BHI+BHIe") {
		t.Errorf("output under a pty %q", b)
	}
	// Without a pty (a pipe) the same command prints plain lines.
	b, err = exec.Command(bin, "fw", "load", "-image", path, "-bhie", "-seg-len", "16384").CombinedOutput()
	if err != nil || strings.Contains(string(b), "\r") || !strings.Contains(string(b), "BHIe: 200000 bytes loaded") {
		t.Errorf("through a pipe: %v %q", err, b)
	}
}
