package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/mhi/sim"
)

// withSimSahara makes -device sim use the emulated SBL that build
// returns (after the command's own choice, in which images and dump are
// passed) and returns where it will be.
func withSimSahara(t *testing.T, adjust func(s *sim.Sahara)) **sim.Sahara {
	t.Helper()
	old := newSimSahara
	var got *sim.Sahara
	newSimSahara = func(images []sim.SaharaImage, dump bool) *sim.Sahara {
		got = old(images, dump)
		if adjust != nil {
			adjust(got)
		}
		return got
	}
	t.Cleanup(func() { newSimSahara = old })
	return &got
}

func randomFile(t *testing.T, seed byte, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	name := filepath.Join(t.TempDir(), "image.bin")
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return name, b
}

// TestSaharaLoadsImagesIntoTheEmulatedSBL: mhictl sahara -image serves
// two images to the emulated qcom-qdu100's SBL, with 32-bit READ_DATA and
// with READ_DATA64; the SBL holds exactly the files' bytes, the modem
// then boots to mission mode, and progress and the JSON summary say so.
func TestSaharaLoadsImagesIntoTheEmulatedSBL(t *testing.T) {
	for _, wide := range []bool{false, true} {
		t.Run(map[bool]string{false: "READ_DATA", true: "READ_DATA64"}[wide], func(t *testing.T) {
			f13, b13 := randomFile(t, 1, 300_000)
			f21, b21 := randomFile(t, 2, 4097)
			sbl := withSimSahara(t, func(s *sim.Sahara) { s.Wide = wide })
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"sahara", "-json", "-image", "13=" + f13, "-image", "0x15=" + f21}, &out, &errb)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			s := *sbl
			if !s.Finished() || !bytes.Equal(s.Received(13), b13) || !bytes.Equal(s.Received(21), b21) {
				t.Fatalf("SBL finished=%v, image 13 %d/%d bytes, image 21 %d/%d bytes", s.Finished(), len(s.Received(13)), len(b13), len(s.Received(21)), len(b21))
			}
			var got saharaOut
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if got.Mode != "image" || got.Images["13"] != uint64(len(b13)) || got.Images["21"] != uint64(len(b21)) || !got.MissionMode || got.Profile != "qcom-qdu100" {
				t.Errorf("summary %+v", got)
			}
			if !strings.Contains(errb.String(), "image 13 (image.bin): 300000/300000 bytes read by the SBL") {
				t.Errorf("no final progress line for image 13:\n%s", errb.String())
			}
		})
	}
}

// TestSaharaCollectsTheMemoryDump: an emulated SBL in memory debug mode
// (32- and 64-bit debug table) offers its RAM; mhictl sahara -dump DIR
// writes each region byte-exact under the SBL's filename and lists them
// in dump.txt. A second run into the same directory fails rather than
// overwrite, and an SBL offering a dump without -dump is refused with a
// hint.
func TestSaharaCollectsTheMemoryDump(t *testing.T) {
	for _, wide := range []bool{false, true} {
		t.Run(map[bool]string{false: "MEMORY_DEBUG", true: "MEMORY_DEBUG64"}[wide], func(t *testing.T) {
			sbl := withSimSahara(t, func(s *sim.Sahara) { s.Wide = wide })
			dir := filepath.Join(t.TempDir(), "dump")
			var out, errb bytes.Buffer
			if code := run(context.Background(), []string{"sahara", "-dump", dir}, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if err := (*sbl).Err(); err != nil {
				t.Fatal(err)
			}
			regions := simDumpRegions()
			for _, r := range regions {
				b, err := os.ReadFile(filepath.Join(dir, r.Filename))
				if err != nil || !bytes.Equal(b, r.Data) {
					t.Errorf("%s: %d bytes (%v), want %d", r.Filename, len(b), err, len(r.Data))
				}
			}
			list, err := os.ReadFile(filepath.Join(dir, "dump.txt"))
			if err != nil || !strings.Contains(string(list), "DDRCS0.BIN\t0x86000000\t196608\tDDR CS0") || !strings.Contains(string(list), "IMEM.BIN") {
				t.Errorf("dump.txt (%v):\n%s", err, list)
			}
			if !strings.Contains(out.String(), "memory dump of 2 regions (196637 bytes)") || !strings.Contains(errb.String(), `region "DDR CS0" at 0x86000000: 196608 bytes -> DDRCS0.BIN`) {
				t.Errorf("output:\n%s\nprogress:\n%s", out.String(), errb.String())
			}

			errb.Reset()
			if code := run(context.Background(), []string{"sahara", "-dump", dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "file exists") {
				t.Errorf("second dump into %s: exit %d: %s", dir, code, errb.String())
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "IMEM.BIN")); !bytes.Equal(b, regions[1].Data) {
				t.Error("the second run changed a dump file")
			}
		})
	}

	// An SBL that offers a dump to a host that asked for images only.
	withSimSahara(t, func(s *sim.Sahara) { s.Images, s.Dump, s.TableAddress = nil, simDumpRegions(), 0x8000_0000 })
	f, _ := randomFile(t, 3, 100)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"sahara", "-image", "13=" + f}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "run again with -dump DIR") {
		t.Errorf("dump without -dump: exit %d: %s", code, errb.String())
	}
}

// TestSaharaRefusesBadArguments: nothing to do, a malformed or repeated
// -image, a missing or empty file, a profile without SAHARA.
func TestSaharaRefusesBadArguments(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.bin")
	os.WriteFile(empty, nil, 0o600)
	f, _ := randomFile(t, 4, 10)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"sahara"}, 2, "-image ID=FILE, or a -dump DIR"},
		{[]string{"sahara", "-image", "13"}, 2, "want ID=FILE"},
		{[]string{"sahara", "-image", "x=" + f}, 2, "want a number"},
		{[]string{"sahara", "-image", "13=" + f, "-image", "0xd=" + f}, 2, "given twice"},
		{[]string{"sahara", "-image", "13=/nonexistent/sbl.bin"}, 1, "no such file"},
		{[]string{"sahara", "-image", "13=" + empty}, 1, "empty"},
		{[]string{"sahara", "-profile", "foxconn-sdx55", "-image", "13=" + f}, 1, "no SAHARA channels"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%q: exit %d, %s; want %d and %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
}
