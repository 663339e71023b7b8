package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDispatcherExitCodes(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	for _, tc := range []struct {
		args []string
		code int
		out  string // expected in stdout+stderr
	}{
		{nil, 2, "sim serve"},
		{[]string{"help"}, 0, "sim serve"},
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"help", "sim", "serve"}, 0, "-socket"},
		{[]string{"sim"}, 2, `"sim" needs a subcommand`},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"sim", "serve", "--help"}, 0, "-syserr-after"},
		{[]string{"sim", "serve", "-h"}, 0, "-profile"},
		{[]string{"sim", "serve"}, 2, "-socket is required"},
		{[]string{"sim", "serve", "-socket", sock, "-profile", "nope"}, 2, "unknown profile"},
		{[]string{"sim", "serve", "-socket", sock, "-function", "IP_HW0=teleport"}, 2, "unknown function"},
		{[]string{"sim", "serve", "-socket", sock, "-function", "NOPE=icmp"}, 2, "no channel pair"},
		{[]string{"sim", "serve", "-socket", sock, "-function", "DIAG=icmp"}, 2, `"DIAG" carries no known framing`},
		{[]string{"sim", "serve", "-socket", sock, "-function", "IPCR=carrier"}, 2, `"IPCR" carries no known framing`},
		{[]string{"sim", "serve", "-socket", sock, "-boot", "sbl"}, 2, "-boot"},
		{[]string{"sim", "serve", "-socket", sock, "extra"}, 2, "unexpected arguments"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), tc.args, &out, &out)
		if code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("mhictl %q: exit %d, want %d; output %q should contain %q", tc.args, code, tc.code, out.String(), tc.out)
		}
	}
}

// TestSimServeAnswersAVFIOUserClientAndStopsOnCancel runs the command as a
// user would, talks the first vfio-user message to it, and stops it.
func TestSimServeAnswersAVFIOUserClientAndStopsOnCancel(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "modem.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var out bytes.Buffer
	go func() {
		done <- run(ctx, []string{"sim", "serve", "-profile", "quectel-em1xx", "-socket", sock, "-strict", "-log-level", "warn"}, &out, &out)
	}()
	var c net.Conn
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no server on %s: %v", sock, err)
		}
	}
	defer c.Close()
	// VERSION 0.0 with an empty JSON object, as a minimal client.
	req := make([]byte, 16+4+3)
	binary.LittleEndian.PutUint16(req[0:], 1)
	binary.LittleEndian.PutUint16(req[2:], 1)
	binary.LittleEndian.PutUint32(req[4:], uint32(len(req)))
	copy(req[20:], "{}\x00")
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [16]byte
	if _, err := c.Read(hdr[:]); err != nil {
		t.Fatal(err)
	}
	if id, cmd, flags := binary.LittleEndian.Uint16(hdr[0:]), binary.LittleEndian.Uint16(hdr[2:]), binary.LittleEndian.Uint32(hdr[8:]); id != 1 || cmd != 1 || flags != 1 {
		t.Errorf("VERSION reply header id %d cmd %d flags %#x", id, cmd, flags)
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
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

// TestHelpListsWholeDescriptions: mhictl help gives every command a
// whole one-line description (it used to print the first line of the
// wrapped --help text, cut mid-sentence).
func TestHelpListsWholeDescriptions(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"help"}, &out, &out); code != 0 {
		t.Fatalf("help: exit %d\n%s", code, out.String())
	}
	_, list, ok := strings.Cut(out.String(), "Commands:\n")
	if !ok {
		t.Fatalf("no command list:\n%s", out.String())
	}
	n := 0
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		n++
		if !strings.HasSuffix(line, ".") || len(line) > 80 {
			t.Errorf("not a whole one-line description (ends with a period, fits 80 columns): %q", line)
		}
	}
	if n != len(commands) {
		t.Errorf("help lists %d commands, %d are registered", n, len(commands))
	}
}
