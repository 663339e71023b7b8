package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestServedSBLLoadsAnImageOverSaharaThroughVFIOUser: a qcom-qdu100
// served as mhictl sim serve -boot pbl -function SAHARA=sahara
// -sahara-images 13:200000 builds it, reached over vfio-user as a
// hardware modem is: the host downloads the SBL over BHI, the SBL stays
// and asks for image 13 over SAHARA, and the host serves it from a
// file by mhictl sahara -device vfio-user:PATH -sbl FILE -image
// 13=FILE; the SBL holds exactly the file's bytes.
func TestServedSBLLoadsAnImageOverSaharaThroughVFIOUser(t *testing.T) {
	p, _ := mhi.Lookup("qcom-qdu100")
	fns, err := serveFunctions(p, functionFlag{"SAHARA": "sahara"}, simnet.NetworkConfig{}, simnet.CarrierOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer fns.close()
	opts := sim.Options{Boot: sim.BootAMSS, Functions: fns.all}
	if err := serveSahara(fns, "13:200000", &opts); err == nil {
		t.Fatal("sahara with -boot amss: no error")
	}
	opts.Boot = sim.BootPBL
	if err := serveSahara(fns, "13:200000", &opts); err != nil || !opts.StayInSBL || len(fns.sahara.Images) != 1 {
		t.Fatalf("serveSahara: %v, StayInSBL %v, images %v", err, opts.StayInSBL, fns.sahara.Images)
	}
	m, err := sim.New(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	sock, stop := serveModem(t, m)
	defer stop()

	img := bytes.Repeat([]byte("sahara image "), 200000/13+1)[:200000]
	file := filepath.Join(t.TempDir(), "image13.bin")
	if err := os.WriteFile(file, img, 0o600); err != nil {
		t.Fatal(err)
	}
	sbl := filepath.Join(t.TempDir(), "sbl.mbn")
	if err := os.WriteFile(sbl, []byte("sbl image"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The served SBL stays (StayInSBL): nothing to wait for after DONE.
	var out, errb bytes.Buffer
	args := []string{"sahara", "-device", "vfio-user:" + sock, "-sbl", sbl, "-image", "13=" + file, "-no-wait", "-timeout", "30s"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("mhictl %s: exit %d: %s (SBL: %v)", strings.Join(args, " "), code, errb.String(), fns.sahara.Err())
	}
	if err := fns.sahara.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "served image 13: 200000 bytes") {
		t.Errorf("output: %s", out.String())
	}
	if !fns.sahara.Finished() || !bytes.Equal(fns.sahara.Received(13), img) {
		t.Errorf("SBL finished=%v, holds %d of %d bytes", fns.sahara.Finished(), len(fns.sahara.Received(13)), len(img))
	}
}
