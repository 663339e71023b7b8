package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// mhictlBinary builds the command once per test binary.
func mhictlBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mhictl-bin")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "mhictl")
		if b, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput(); err != nil {
			buildErr = err
			t.Logf("go build: %s", b)
		}
	})
	if buildErr != nil {
		t.Fatalf("building mhictl: %v", buildErr)
	}
	return builtBin
}

// runBinary runs the built mhictl with args and returns its combined
// output and exit code.
func runBinary(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(mhictlBinary(t), args...)
	b, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("mhictl %s: %v", strings.Join(args, " "), err)
	}
	return string(b), code
}

// TestEverySubcommandAsASubprocess drives the built binary against the
// emulated modem, as a user would, for the table and the -json output of
// every subcommand (fw load's progress output under a pty and through a
// pipe is TestFwLoadUnderAPseudoTerminalDrawsABar).
func TestEverySubcommandAsASubprocess(t *testing.T) {
	type check struct {
		args []string
		want []string // substrings of the output
		json bool     // the output must be one JSON value
	}
	capture := filepath.Join(t.TempDir(), "dl.pcap")
	checks := []check{
		{args: []string{"help"}, want: []string{"status", "capture", "fw load", "sim serve"}},
		{args: []string{"list", "-profiles"}, want: []string{"quectel-rm5xx", "foxconn-t99w175"}},
		{args: []string{"list", "-profiles", "-json"}, json: true, want: []string{"qcom-sdx55m"}},
		{args: []string{"info", "-device", "sim"}, want: []string{"qcom-sdx55m", "AMSS", "IP_HW0"}},
		{args: []string{"info", "-device", "sim", "-json"}, json: true, want: []string{"IP_HW0", "qcom-sdx55m"}},
		{args: []string{"selftest", "-device", "sim", "-count", "50"}, want: []string{"50"}},
		{args: []string{"selftest", "-device", "sim", "-count", "50", "-json"}, json: true},
		{args: []string{"edl", "-device", "sim"}, want: []string{"FP"}},
		{args: []string{"edl", "-device", "sim", "-json"}, json: true},
		{args: []string{"status", "-device", "sim"}, want: []string{"home", "10.0.0.2"}},
		{args: []string{"status", "-device", "sim", "-json"}, json: true, want: []string{"10.0.0.2"}},
		{args: []string{"capture", "-device", "sim", "-o", capture, "-count", "6", "-ping", "198.18.0.1", "-json"}, json: true},
	}
	for _, c := range checks {
		out, code := runBinary(t, c.args...)
		name := strings.Join(c.args, " ")
		if code != 0 {
			t.Errorf("mhictl %s: exit %d\n%s", name, code, out)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("mhictl %s: output lacks %q\n%s", name, w, out)
			}
		}
		if c.json {
			var v any
			// Progress or log lines go to stderr; the JSON is the
			// last non-empty block of the output.
			if err := json.Unmarshal([]byte(lastJSON(out)), &v); err != nil {
				t.Errorf("mhictl %s: output is not JSON (%v)\n%s", name, err, out)
			}
		}
	}
	if st, err := os.Stat(capture); err != nil || st.Size() <= 24 {
		t.Errorf("capture file: %v (size %d)", err, sizeOf(st))
	}
	// Usage errors exit 2 in every subcommand.
	for _, args := range [][]string{{"info", "-bogus"}, {"status", "-bogus"}, {"capture"}, {"nonsense"}} {
		if _, code := runBinary(t, args...); code != 2 {
			t.Errorf("mhictl %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return 0
	}
	return st.Size()
}

// lastJSON returns the output from its first line that opens a JSON
// value, so that stderr lines before it are skipped.
func lastJSON(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "{") || strings.HasPrefix(l, "[") {
			return strings.Join(lines[i:], "\n")
		}
	}
	return out
}

// TestSimServeAsASubprocessStopsCleanlyOnSIGTERM serves the emulated modem
// over vfio-user and stops it with a signal, as the kernel cross-check
// does after QEMU exits.
func TestSimServeAsASubprocessStopsCleanlyOnSIGTERM(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "modem.sock")
	cmd := exec.Command(mhictlBinary(t), "sim", "serve", "-profile", "quectel-rm5xx", "-socket", sock)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no socket after 10 s\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sim serve after SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("sim serve ignored SIGTERM\n%s", out.String())
	}
}

// TestSimServeWithTheCarrierNetworkReportsItsCountersOnSIGUSR2: the
// kernel cross-check puts the carrier network on the guest's data pair
// and reads DL aggregation from the "carrier stats" lines SIGUSR2 asks
// for (and the server logs again at exit).
func TestSimServeWithTheCarrierNetworkReportsItsCountersOnSIGUSR2(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "modem.sock")
	cmd := exec.Command(mhictlBinary(t), "sim", "serve", "-profile", "quectel-em1xx", "-socket", sock,
		"-function", "IP_HW0_MBIM=carrier", "-flush-delay", "300us")
	// SIGUSR2 is sent as soon as "serving" is logged; the delay keeps the
	// watcher from starting before it, so the handler must already be
	// installed when the line is logged (with the default action the
	// signal kills the server).
	cmd.Env = append(os.Environ(), "MHICTL_TEST_WATCH_DELAY=300ms")
	var out syncBuilder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "serving the emulated modem") {
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 10 s\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGUSR2)
	for !strings.Contains(out.String(), `msg="carrier stats" channel=IP_HW0_MBIM`) {
		if time.Now().After(deadline) {
			t.Fatalf("no carrier stats after SIGUSR2\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Fatalf("sim serve after SIGTERM: %v\n%s", err, out.String())
	}
	done <- nil
	if n := strings.Count(out.String(), `msg="carrier stats"`); n != 2 {
		t.Errorf("%d carrier stats lines, want 2 (SIGUSR2 and exit)\n%s", n, out.String())
	}
}

// syncBuilder is a strings.Builder safe for a subprocess's writers and a
// reader.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
