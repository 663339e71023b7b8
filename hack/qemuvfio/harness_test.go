package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

func TestInitramfsIsNewcCpio(t *testing.T) {
	var buf bytes.Buffer
	err := writeInitramfs(&buf, map[string]entry{
		"bin":         {mode: modeDir},
		"bin/sh":      {mode: modeSymlink, data: []byte("busybox")},
		"init":        {mode: modeExec, data: []byte("#!/bin/sh\n")},
		"lib/x.ko":    {mode: modeFile, data: []byte{1, 2, 3}},
		"lib":         {mode: modeDir},
		"tmp":         {mode: modeDir},
		"bin/busybox": {mode: modeExec, data: bytes.Repeat([]byte{0x7f}, 5)},
	})
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	// Walk the archive as the kernel does.
	var names []string
	for off := 0; ; {
		h := string(raw[off : off+110])
		if !strings.HasPrefix(h, "070701") {
			t.Fatalf("bad magic at %d: %q", off, h[:6])
		}
		field := func(i int) int {
			var v int
			for _, c := range h[6+8*i : 14+8*i] {
				v = v*16 + strings.IndexRune("0123456789abcdef", c)
			}
			return v
		}
		size, namesize := field(6), field(11)
		name := string(raw[off+110 : off+110+namesize-1])
		names = append(names, name)
		off = (off + 110 + namesize + 3) &^ 3
		data := raw[off : off+size]
		if name == "lib/x.ko" && !bytes.Equal(data, []byte{1, 2, 3}) {
			t.Errorf("lib/x.ko holds % x", data)
		}
		if name == "bin/sh" && (string(data) != "busybox" || field(1) != modeSymlink) {
			t.Errorf("bin/sh = %q mode %o", data, field(1))
		}
		off = (off + size + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(raw) {
				t.Errorf("%d bytes after the trailer", len(raw)-off)
			}
			break
		}
	}
	want := "bin bin/busybox bin/sh init lib lib/x.ko tmp TRAILER!!!"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("entries %q, want %q", got, want)
	}
}

func TestResultVerdict(t *testing.T) {
	out := `[    1.9] Run /init as init process
MHISTACK-INIT uptime=1.96
=== RUN   TestGuestEdu
    guest_test.go:60: edu at 0000:00:01.0
=== RUN   TestGuestEdu/MMIO
    --- PASS: TestGuestEdu/MMIO (0.00s)
--- PASS: TestGuestEdu (0.31s)
--- SKIP: TestOther (0.00s)
--- PASS: TestGuestNVMeMSIX (0.10s)
PASS
MHISTACK-TEST-EXIT=0 uptime=3.19
`
	r := newResult()
	for _, l := range strings.Split(out, "\n") {
		r.line(l + "\r")
	}
	if err := r.verdict([]string{"TestGuestEdu", "TestGuestNVMeMSIX"}); err != nil {
		t.Fatalf("verdict: %v", err)
	}
	if r.initUptime != 1.96 || r.endUptime != 3.19 || len(r.pass) != 3 || len(r.skip) != 1 {
		t.Errorf("result %+v", r)
	}

	bad := newResult()
	bad.line("    --- FAIL: TestGuestEdu/DMARoundTrip (0.2s)")
	bad.line("--- SKIP: TestGuestNVMeMSIX (0.00s)")
	bad.line("MHISTACK-INSMOD-FAIL vfio-pci")
	err := bad.verdict([]string{"TestGuestNVMeMSIX"})
	for _, want := range []string{"never reported", "TestGuestEdu/DMARoundTrip", "TestGuestNVMeMSIX did not pass", "insmod failed: vfio-pci"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("verdict %v does not mention %q", err, want)
		}
	}
}
