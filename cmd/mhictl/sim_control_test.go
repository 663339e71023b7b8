package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The control socket injects faults into a running sim serve and reports
// its counters; "mhictl sim control" is its client.
func TestSimServeControlSocketInjectsFaultsAndReportsCounters(t *testing.T) {
	dir := t.TempDir()
	sock, ctl := filepath.Join(dir, "modem.sock"), filepath.Join(dir, "control.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var out syncBuilder
	go func() {
		done <- run(ctx, []string{"sim", "serve", "-profile", "qcom-sdx55m", "-socket", sock, "-control", ctl,
			"-function", "IP_HW0=carrier"}, &out, &out)
	}()
	call := func(args ...string) (string, int) {
		var b bytes.Buffer
		code := run(context.Background(), append([]string{"sim", "control", "-socket", ctl}, args...), &b, &b)
		return strings.TrimSpace(b.String()), code
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ctl); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no control socket; output:\n%s", out.String())
		}
	}
	if r, code := call("stats"); code != 0 || !strings.HasPrefix(r, "ok state=") || !strings.Contains(r, "dma_windows=0") || !strings.Contains(r, "IP_HW0: ul_packets=0") {
		t.Errorf("stats: exit %d, %q", code, r)
	}
	if r, code := call("slow", "1ms"); code != 0 || r != "ok slow 1ms" {
		t.Errorf("slow 1ms: exit %d, %q", code, r)
	}
	if r, code := call("slow", "soon"); code != 1 || !strings.Contains(r, "usage: slow DURATION") {
		t.Errorf("slow soon: exit %d, %q", code, r)
	}
	if r, code := call("teleport"); code != 1 || !strings.Contains(r, "unknown command") {
		t.Errorf("teleport: exit %d, %q", code, r)
	}
	// No host has started the modem: SYS_ERR is still injected (a modem
	// may crash at any time) and the state says so.
	if r, code := call("crash"); code != 0 || r != "ok SYS_ERR" {
		t.Errorf("crash: exit %d, %q", code, r)
	}
	if r, _ := call("stats"); !strings.Contains(r, "state=SYS_ERR") {
		t.Errorf("stats after crash: %q", r)
	}
	if code := run(context.Background(), []string{"sim", "control", "stats"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("sim control without -socket: exit %d, want 2", code)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after cancel; output:\n%s", code, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim serve did not stop")
	}
	if _, err := os.Stat(ctl); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
	for _, want := range []string{`msg="injecting SYS_ERR" why="control: crash"`, "part=control command=stats"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}
