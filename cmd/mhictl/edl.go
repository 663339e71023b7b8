package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

func init() {
	register(&command{
		Name:  "edl",
		Short: "Force the modem into EDL and talk Firehose to its programmer.",
		Summary: `Force the modem into emergency download (EDL) mode with the doorbell-91
cookie and a SoC reset, load the flash programmer (-image) over BHI and wait
for it to run (EE FP); then send a Firehose <nop/> on FIREHOSE (34/35) and
print the answer. Only profiles with an EDL trigger support it. With -device
sim, -image defaults to a dummy programmer and FIREHOSE answers ACK.`,
		Run: edl,
	})
}

type edlOut struct {
	Device   string `json:"device"`
	Profile  string `json:"profile"`
	Image    string `json:"image"`
	Bytes    int    `json:"bytes"`
	EE       string `json:"ee"`
	Firehose string `json:"firehose_response,omitempty"`
}

// simProgrammer stands in for a flash programmer on the emulated modem.
var simProgrammer = []byte("mhistack emulated flash programmer\n")

// firehoseNOP is the smallest Firehose request a programmer answers.
var firehoseNOP = []byte(`<?xml version="1.0" encoding="UTF-8" ?><data><nop /></data>`)

func edl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["edl"]
	fs := newFlagSet(c, "-image FILE [-device sim|ADDRESS|vfio-user:PATH] [flags]", stderr)
	df := addDeviceFlags(fs)
	image := fs.String("image", "", "flash programmer `file` (prog_firehose_*.mbn / *.elf); required for hardware")
	nop := fs.Bool("nop", true, "send a Firehose <nop/> once the programmer runs and print the answer")
	progress := addProgressFlag(fs)
	if err := parseNoArgs(fs, args, df.check); err != nil {
		return err
	}
	prog, name := simProgrammer, "(built-in emulated programmer)"
	switch {
	case *image != "":
		b, err := os.ReadFile(*image)
		if err != nil {
			return fmt.Errorf("read the flash programmer: %w", err)
		}
		if len(b) == 0 {
			return fmt.Errorf("%s is empty; pass the modem's prog_firehose image", *image)
		}
		prog, name = b, *image
	case df.device != "sim":
		return usagef("-image is required for hardware (the profile names the usual file; mhictl list -profiles)")
	}
	if df.device == "sim" && !df.simProfile().EDLTrigger {
		return fmt.Errorf("profile %s has no EDL trigger; pick one that has (mhictl list -profiles), e.g. %s", df.simProfile().Name, defaultSimProfile)
	}
	pp := newProgressPrinter(progressOut(df, stdout, stderr), *progress)
	so := sim.Options{Functions: map[string]sim.Function{}}
	if _, _, ok := df.simProfile().ChannelPair("FIREHOSE"); ok {
		so.Functions["FIREHOSE"] = &sim.Firehose{}
	}
	t, err := df.open(so, mhi.Options{Boot: mhi.BootOptions{OnProgress: pp.report}}, mhi.DMAUse{Firmware: len(prog)}, 0)
	if err != nil {
		return err
	}
	defer t.close()
	ctx, cancel := df.context(ctx)
	defer cancel()
	if err := t.c.EnterEDL(ctx, prog); err != nil {
		return hint(err)
	}
	_, ee, _ := t.c.State()
	out := edlOut{Device: df.device, Profile: t.c.Profile().Name, Image: name, Bytes: len(prog), EE: ee.String()}
	if *nop {
		if _, _, ok := t.c.Profile().ChannelPair("FIREHOSE"); !ok {
			return fmt.Errorf("profile %s has no FIREHOSE channels; the programmer runs but cannot be talked to over MHI", out.Profile)
		}
		pio, err := openPair(ctx, t.c, t.dev.DMA(), "FIREHOSE", 4096, 4, 4)
		if err != nil {
			return hint(fmt.Errorf("open FIREHOSE: %w", err))
		}
		defer pio.close()
		if err := pio.send(ctx, firehoseNOP); err != nil {
			return hint(fmt.Errorf("FIREHOSE send: %w", err))
		}
		resp, err := pio.recv(ctx, 5*time.Second)
		if err != nil {
			return fmt.Errorf("FIREHOSE: no answer to <nop/>: %w; the programmer may not speak Firehose over MHI", err)
		}
		out.Firehose = string(resp)
	}
	if df.json {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "flash programmer %s (%d bytes) running; modem in EE %s\n", out.Image, out.Bytes, out.EE)
	if out.Firehose != "" {
		fmt.Fprintf(stdout, "FIREHOSE <nop/> answer: %s\n", out.Firehose)
	}
	return nil
}
