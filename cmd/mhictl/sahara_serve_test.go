package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pairconn"
	"github.com/mhistack/mhistack/mhi/sahara"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestServedSBLLoadsAnImageOverSaharaThroughVFIOUser: a qcom-qdu100
// served as mhictl sim serve -boot pbl -function SAHARA=sahara
// -sahara-images 13:200000 builds it, reached over vfio-user as a
// hardware modem is: the host downloads the SBL over BHI, the SBL stays
// and asks for image 13 over SAHARA, and sahara.Host serves it from a
// file; the SBL holds exactly the file's bytes.
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
	df := &deviceFlags{device: "vfio-user:" + sock}
	// pairconn's buffers: its RX ones and, by default, one TX buffer
	// per element of the UL ring (127 on the qdu100's SAHARA).
	ul, _, _ := p.ChannelPair("SAHARA")
	extra := (pairconn.DefaultRxBufs + ul.Elements - 1) * mhi.DMAFootprint(pairconn.MaxBufLen, 64)
	sbl := []byte("sbl image")
	tg, err := df.open(sim.Options{}, mhi.Options{Firmware: func(string) ([]byte, error) { return sbl, nil }}, mhi.DMAUse{Firmware: len(sbl)}, extra)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.close()
	// The power-up waits for mission mode, which the held SBL never
	// reports: it runs until the test ends.
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan error, 1)
	go func() { up <- tg.c.PowerUp(ctx) }()
	defer func() { cancel(); <-up }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, ee, _ := tg.c.State(); st == mhi.StateM0 && ee == mhi.EESBL {
			break
		}
		if time.Now().After(deadline) {
			st, ee, _ := tg.c.State()
			t.Fatalf("modem not in the SBL after 20 s (state %v, EE %v)", st, ee)
		}
	}
	conn, err := pairconn.Open(context.Background(), tg.c, tg.dev.DMA(), "SAHARA", pairconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := &sahara.Host{Images: map[uint32]string{13: file}}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	res, err := h.Run(rctx, conn)
	if err != nil {
		t.Fatalf("Run: %v (target: %v)", err, fns.sahara.Err())
	}
	if err := fns.sahara.Err(); err != nil {
		t.Fatal(err)
	}
	if !fns.sahara.Finished() || !bytes.Equal(fns.sahara.Received(13), img) || res.Served[13] != uint64(len(img)) {
		t.Errorf("SBL finished=%v, holds %d of %d bytes; host served %v", fns.sahara.Finished(), len(fns.sahara.Received(13)), len(img), res.Served)
	}
}
