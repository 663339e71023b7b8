package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

func init() {
	register(&command{
		Name:  "fw load",
		Short: "Load a boot image into a modem in PBL (BHI or BHIe).",
		Summary: `Load a boot image into a modem waiting in its boot ROM (PBL) and bring it to
mission mode: over BHI (one buffer), or with -bhie as a full boot chain (the
first -sbl-size bytes over BHI, then the whole image over the BHIe vector
table when the modem reports SBL). -device sim starts the emulated modem in
PBL.`,
		Run: fwLoad,
	})
}

type fwOut struct {
	Device      string `json:"device"`
	Profile     string `json:"profile"`
	Image       string `json:"image"`
	Bytes       int    `json:"bytes"`
	SHA256      string `json:"sha256"`
	Method      string `json:"method"` // "BHI" or "BHI+BHIe"
	EE          string `json:"ee"`
	MissionMode bool   `json:"mission_mode"`
	// DeviceSHA256 is what the emulated modem received (sim only).
	DeviceBHISHA256  string `json:"device_bhi_sha256,omitempty"`
	DeviceBHIeSHA256 string `json:"device_bhie_sha256,omitempty"`
}

func fwLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["fw load"]
	fs := newFlagSet(c, "-image FILE [-bhie] [-device sim|ADDRESS|vfio-user:PATH] [flags]", stderr)
	df := addDeviceFlags(fs)
	image := fs.String("image", "", "boot image `file` to load (required)")
	bhie := fs.Bool("bhie", false, "full boot chain: the first -sbl-size bytes over BHI, the whole image over BHIe")
	sblSize := fs.Int("sbl-size", 0, "bytes of the image the PBL receives with -bhie (0: the whole image)")
	segLen := fs.Int("seg-len", mhi.DefaultSegLen, "BHIe segment length in bytes")
	progress := addProgressFlag(fs)
	if err := parseNoArgs(fs, args, df.check); err != nil {
		return err
	}
	if *image == "" {
		return usagef("-image is required")
	}
	if *sblSize < 0 || *segLen <= 0 {
		return usagef("-sbl-size must be >= 0 and -seg-len > 0")
	}
	img, err := os.ReadFile(*image)
	if err != nil {
		return fmt.Errorf("read the image: %w", err)
	}
	if len(img) == 0 {
		return fmt.Errorf("%s is empty; pass the modem's boot image (e.g. sbl1.mbn / xbl.elf)", *image)
	}
	pp := newProgressPrinter(progressOut(df, stdout, stderr), *progress)
	loaded := false
	co := mhi.Options{Boot: mhi.BootOptions{
		Image: img, FullBootChain: *bhie, SBLSize: *sblSize, SegLen: *segLen,
		OnProgress: func(p mhi.Progress) {
			if p.Phase == mhi.PhaseBHI && p.Complete {
				loaded = true
			}
			pp.report(p)
		},
	}}
	t, err := df.open(sim.Options{Boot: sim.BootPBL}, co, mhi.DMAUse{Firmware: len(img), SegLen: *segLen}, 0)
	if err != nil {
		return err
	}
	defer t.close()
	if t.modem != nil && *bhie {
		t.modem.SetFullBootChain(true)
	}
	ctx, cancel := df.context(ctx)
	defer cancel()
	if err := t.c.PowerUp(ctx); err != nil {
		return hint(fmt.Errorf("load %s: %w", *image, err))
	}
	_, ee, mission := t.c.State()
	if !loaded {
		return fmt.Errorf("the modem was already in EE %s, not PBL: nothing loaded; reset it into its boot ROM first", ee)
	}
	sum := sha256.Sum256(img)
	out := fwOut{
		Device: df.device, Profile: t.c.Profile().Name, Image: *image, Bytes: len(img),
		SHA256: hex.EncodeToString(sum[:]), Method: "BHI", EE: ee.String(), MissionMode: mission,
	}
	if *bhie {
		out.Method = "BHI+BHIe"
	}
	if t.modem != nil {
		if b := t.modem.BHIImage(); b.Size > 0 {
			out.DeviceBHISHA256 = hex.EncodeToString(b.SHA256[:])
		}
		if b := t.modem.BHIeImage(); b.Size > 0 {
			out.DeviceBHIeSHA256 = hex.EncodeToString(b.SHA256[:])
		}
	}
	if df.json {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "loaded %s (%d bytes, sha256 %s) over %s; modem in EE %s, mission mode %v\n",
		out.Image, out.Bytes, out.SHA256[:16], out.Method, out.EE, out.MissionMode)
	if out.DeviceBHIeSHA256 != "" {
		fmt.Fprintf(stdout, "emulated modem received over BHIe: sha256 %s\n", out.DeviceBHIeSHA256[:16])
	} else if out.DeviceBHISHA256 != "" {
		fmt.Fprintf(stdout, "emulated modem received over BHI: sha256 %s\n", out.DeviceBHISHA256[:16])
	}
	return nil
}

// progressOut is where progress goes: stdout, or stderr when stdout
// carries JSON.
func progressOut(df *deviceFlags, stdout, stderr io.Writer) io.Writer {
	if df.json {
		return stderr
	}
	return stdout
}
