package mhi_test

import (
	"context"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/sim"
)

// DMASize bounds what the engine allocates: a full-boot-chain power-up
// (BHI, then BHIe of the whole image) and a control port on every pair
// fit in an IOVA window of exactly that many bytes, with no headroom.
func TestDMASizeBoundsBootAndControlPorts(t *testing.T) {
	p := profile(t, "qcom-sdx55m")
	img := bootImage(3<<20 + 12345)
	u := mhi.DMAUse{Firmware: len(img), SegLen: 64 << 10}
	r := mhitest.New(t, mhitest.Options{Profile: p, Sim: sim.Options{Boot: sim.BootPBL}, IOVAWindow: uint64(mhi.DMASize(p, u)),
		Controller: mhi.Options{
			Firmware: func(string) ([]byte, error) { return img, nil },
			Boot:     mhi.BootOptions{FullBootChain: true, SBLSize: 1 << 20, SegLen: u.SegLen},
		}, NoPowerUp: true})
	c := r.Controller
	r.Modem.SetFullBootChain(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.PowerUp(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, cc := range p.Channels {
		if seen[cc.Name] || !cc.EE.Has(mhi.EEAMSS) {
			continue
		}
		seen[cc.Name] = true
		port, err := c.OpenControl(ctx, cc.Name, mhi.ControlOptions{})
		if err != nil {
			t.Fatalf("%s: %v", cc.Name, err)
		}
		defer port.Close()
	}
}
