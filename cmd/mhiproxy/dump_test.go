package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// -dump-dir: the emulated modem's firmware crashes into RDDM while
// mhiproxy serves; the dump lands in the directory, named after the device
// and the time, and the log names the file.
func TestDumpDirWritesTheCrashDump(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	dir := t.TempDir()
	nws := make(chan network, 1)
	open := func(ctx context.Context, o openOptions) (network, error) {
		nw, err := openModem(ctx, o)
		if err == nil {
			nws <- nw
		}
		return nw, err
	}
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-dump-dir", dir, "-log-level", "warn"}, &stdout, &stderr, open)
	}()
	var nw network
	select {
	case nw = <-nws:
	case code := <-done:
		t.Fatalf("exit %d before bring-up; stderr %q", code, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("no bring-up within 60s")
	}
	m := nw.(*modem).Controller().Device().(*vpci.Device).Model().(*sim.Modem)
	img := bytes.Repeat([]byte("crashed firmware RAM "), 1000)
	if err := m.TriggerCrash(img); err != nil {
		t.Fatal(err)
	}
	var files []string
	for deadline := time.Now().Add(30 * time.Second); len(files) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no dump in %s; stderr %q", dir, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
		files, _ = filepath.Glob(filepath.Join(dir, "sim-*.rddm"))
	}
	for !strings.Contains(stderr.String(), files[0]) {
		select {
		case <-time.After(10 * time.Millisecond):
		case code := <-done:
			t.Fatalf("exit %d; stderr %q", code, stderr.String())
		}
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, img) {
		t.Errorf("dump file of %d bytes does not start with the modem's image", len(b))
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d; stderr %q", code, stderr.String())
	}
}

func TestDumpDirMustBeADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{f, filepath.Join(t.TempDir(), "missing")} {
		if _, err := parseFlags([]string{"-dump-dir", dir}, &bytes.Buffer{}); err == nil {
			t.Errorf("-dump-dir %s accepted", dir)
		}
	}
}
