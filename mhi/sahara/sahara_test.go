package sahara_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pairconn"
	"github.com/mhistack/mhistack/mhi/sahara"
	"github.com/mhistack/mhistack/mhi/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sblRig powers an emulated qcom-qdu100 (SAHARA is an SBL channel there)
// up from PBL and holds it in the SBL with fn on SAHARA; it returns the
// open SAHARA connection. The power-up finishes when the test lets the
// SBL go (Modem.LeaveSBL) or is cancelled at cleanup.
func sblRig(t *testing.T, fn sim.Function) (*mhitest.Rig, *pairconn.Conn) {
	t.Helper()
	r := mhitest.New(t, mhitest.Options{
		ProfileName: "qcom-qdu100",
		Sim:         sim.Options{Boot: sim.BootPBL, StayInSBL: true},
		Functions:   map[string]sim.Function{"SAHARA": fn},
		Controller:  mhi.Options{Firmware: func(string) ([]byte, error) { return []byte("sbl image"), nil }},
		NoPowerUp:   true,
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Controller.PowerUp(ctx) }()
	t.Cleanup(func() { cancel(); <-errc })
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, ee, _ := r.Controller.State()
		if st == mhi.StateM0 && ee == mhi.EESBL {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("modem not in the SBL after 10 s (state %v, EE %v)", st, ee)
		}
		time.Sleep(time.Millisecond)
	}
	conn, err := pairconn.Open(context.Background(), r.Controller, r.Host.DMA(), "SAHARA", pairconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return r, conn
}

func writeImage(t *testing.T, seed uint64, n int) (string, []byte) {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	name := filepath.Join(t.TempDir(), "image.bin")
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return name, b
}

// TestSBLLoadsImagesOverSAHARA: the emulated SBL asks for two images
// (one needing several READ_DATA, the second with READ_DATA64) over the
// SAHARA channels; the host serves them from files and the SBL holds
// exactly their bytes when DONE_RESP says complete.
func TestSBLLoadsImagesOverSAHARA(t *testing.T) {
	for _, wide := range []bool{false, true} {
		t.Run(map[bool]string{false: "READ_DATA", true: "READ_DATA64"}[wide], func(t *testing.T) {
			f1, b1 := writeImage(t, 1, 300_000)
			f2, b2 := writeImage(t, 2, 4097)
			s := &sim.Sahara{Images: []sim.SaharaImage{{ID: 13, Size: len(b1)}, {ID: 21, Size: len(b2)}}, Chunk: 0x20000, Wide: wide}
			_, conn := sblRig(t, s)
			var reads int
			h := &sahara.Host{Images: map[uint32]string{13: f1, 21: f2}, OnProgress: func(uint32, uint64, uint64) { reads++ }}
			res, err := h.Run(context.Background(), conn)
			if err != nil {
				t.Fatalf("Run: %v (target: %v)", err, s.Err())
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			if !s.Finished() || !bytes.Equal(s.Received(13), b1) || !bytes.Equal(s.Received(21), b2) {
				t.Fatalf("target finished=%v, image 13 %d/%d bytes, image 21 %d/%d bytes", s.Finished(), len(s.Received(13)), len(b1), len(s.Received(21)), len(b2))
			}
			if res.Served[13] != uint64(len(b1)) || reads != 4 {
				t.Errorf("served %v in %d reads, want %d bytes of image 13 in 3+1 reads", res.Served, reads, len(b1))
			}
		})
	}
}

// TestUnknownImageIsAnsweredWithReset: the SBL asks for an image the host
// does not have; Run fails with ErrUnknownImage and sends RESET, which the
// target answers.
func TestUnknownImageIsAnsweredWithReset(t *testing.T) {
	s := &sim.Sahara{Images: []sim.SaharaImage{{ID: 7, Size: 100}}}
	_, conn := sblRig(t, s)
	_, err := (&sahara.Host{Images: map[uint32]string{}}).Run(context.Background(), conn)
	if !errors.Is(err, sahara.ErrUnknownImage) {
		t.Fatalf("Run = %v, want ErrUnknownImage", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := conn.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := sahara.Decode(b); err != nil || p.Cmd != sahara.CmdResetResp {
		t.Fatalf("after RESET the target sent %v (%v), want RESET_RESP", p.Cmd, err)
	}
}

// TestMemoryDumpOverSAHARA collects a RAM dump (32- and 64-bit) from the
// emulated SBL: the table, every region byte-exact (one region needs
// several MEMORY_READs and one is 16 bytes long, which the host must not
// request as one read), then RESET/RESET_RESP; a filename with a path in it
// arrives sanitised.
func TestMemoryDumpOverSAHARA(t *testing.T) {
	for _, wide := range []bool{false, true} {
		t.Run(map[bool]string{false: "MEMORY_DEBUG", true: "MEMORY_DEBUG64"}[wide], func(t *testing.T) {
			_, big := writeImage(t, 3, 150_000)
			small := []byte("0123456789abcdef")
			s := &sim.Sahara{Wide: wide, TableAddress: 0x1000, Dump: []sim.SaharaRegion{
				{Region: sahara.Region{Type: 1, Address: 0x80000000, Length: uint64(len(big)), Description: "DDR", Filename: "../../etc/passwd"}, Data: big},
				{Region: sahara.Region{Type: 1, Address: 0x10000, Length: 16, Description: "IMEM", Filename: "imem.bin"}, Data: small},
			}}
			_, conn := sblRig(t, s)
			got := map[string][]byte{}
			h := &sahara.Host{OnRegion: func(r sahara.Region, data []byte) error {
				got[r.Filename] = data
				return nil
			}}
			res, err := h.Run(context.Background(), conn)
			if err != nil {
				t.Fatalf("Run: %v (target: %v)", err, s.Err())
			}
			if res.Regions != 2 || !s.Finished() || s.Err() != nil {
				t.Fatalf("%d regions, target finished=%v err=%v", res.Regions, s.Finished(), s.Err())
			}
			if !bytes.Equal(got[".._.._etc_passwd"], big) || !bytes.Equal(got["imem.bin"], small) {
				t.Errorf("dump regions differ: have %d names %v", len(got), keys(got))
			}
		})
	}
}

// TestDumpRefusedWithoutOnRegion: a memory-debug HELLO with no OnRegion
// is refused (ErrNoDump), not half-served.
func TestDumpRefusedWithoutOnRegion(t *testing.T) {
	s := &sim.Sahara{Dump: []sim.SaharaRegion{{Region: sahara.Region{Address: 0, Length: 4}, Data: []byte("abcd")}}, TableAddress: 0x100}
	_, conn := sblRig(t, s)
	if _, err := (&sahara.Host{}).Run(context.Background(), conn); !errors.Is(err, sahara.ErrNoDump) {
		t.Fatalf("Run = %v, want ErrNoDump", err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
