package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

func init() {
	register(&command{
		Name:  "info",
		Short: "Power the modem up and print its profile, MHI state, channels.",
		Summary: `Power the modem up to mission mode and print its profile, MHI version,
execution environment, MHI state, serial number, channels and event rings.
With -watch, keep it powered that long first and count its firmware crashes:
a modem that crash-loops (a bad flash) fails with the command that reflashes
it (docs/FLASHING.md, "A bricked modem").`,
		Run: info,
	})
}

type infoOut struct {
	Device       string       `json:"device"`
	PCI          string       `json:"pci"`
	Profile      string       `json:"profile"`
	Model        string       `json:"model"`
	MHIVersion   string       `json:"mhi_version"`
	SOCHWVersion string       `json:"soc_hw_version"`
	EE           string       `json:"ee"`
	State        string       `json:"state"`
	MissionMode  bool         `json:"mission_mode"`
	SerialNumber string       `json:"serial_number"`
	MRU          int          `json:"mru"`
	Channels     []chanInfo   `json:"channels"`
	EventRings   []ringInfo   `json:"event_rings"`
	Stats        mhi.Stats    `json:"stats"`
	Firmware     firmwareInfo `json:"firmware"`
	// Crashes counts the firmware crashes (SYS_ERR) seen during -watch.
	Crashes int `json:"crashes"`
}

type firmwareInfo struct {
	Image      string `json:"image,omitempty"`
	EDLImage   string `json:"edl_image,omitempty"`
	EDLTrigger bool   `json:"edl_trigger"`
}

type chanInfo struct {
	Num       int      `json:"num"`
	Name      string   `json:"name"`
	Dir       string   `json:"dir"`
	Elements  int      `json:"elements"`
	EventRing int      `json:"event_ring"`
	EE        []string `json:"ee"`
	Burst     bool     `json:"burst"`
}

type ringInfo struct {
	Index    int    `json:"index"`
	Kind     string `json:"kind"`
	Elements int    `json:"elements"`
	IntModMs int    `json:"intmod_ms"`
	Channel  int    `json:"channel"` // dedicated channel of a hardware ring, -1 otherwise
}

func info(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["info"]
	fs := newFlagSet(c, "[-device sim|ADDRESS|vfio-user:PATH] [flags]", stderr)
	df := addDeviceFlags(fs)
	watch := fs.Duration("watch", 0, "after power-up, keep the modem up this `long` and count its firmware crashes; fail if they stop recovery (a crash loop); must be below -timeout")
	if err := parseNoArgs(fs, args, df.check); err != nil {
		return err
	}
	if *watch < 0 || (*watch > 0 && *watch >= df.timeout) {
		return usagef("-watch %v: want 0 (off) or a duration below -timeout (%v)", *watch, df.timeout)
	}
	t, err := df.open(sim.Options{}, mhi.Options{Boot: waitProgress(stderr)}, mhi.DMAUse{}, 0)
	if err != nil {
		return err
	}
	defer t.close()
	ctx, cancel := df.context(ctx)
	defer cancel()
	crashes, failed, unsubscribe := watchCrashes(t.c)
	defer unsubscribe()
	if err := t.c.PowerUp(ctx); err != nil {
		return hint(fmt.Errorf("power up: %w", err))
	}
	if *watch > 0 {
		timer := time.NewTimer(*watch)
		defer timer.Stop()
		select {
		case err := <-failed:
			return hint(fmt.Errorf("%s: %w", t.dev.Info(), err))
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	out, err := describe(df.device, t)
	if err != nil {
		return err
	}
	out.Crashes = int(crashes.Load())
	if df.json {
		return writeJSON(stdout, out)
	}
	printInfo(stdout, out)
	return nil
}

// watchCrashes counts c's SYS_ERRs and delivers the error of a recovery
// that gave up (a crash loop stops recovery: mhi.ErrCrashLoop).
func watchCrashes(c *mhi.Controller) (crashes *atomic.Int32, failed <-chan error, cancel func()) {
	crashes = new(atomic.Int32)
	ch := make(chan error, 1)
	cancel = c.Subscribe(func(e mhi.Event) {
		switch e.Kind {
		case mhi.EventSysErr:
			crashes.Add(1)
		case mhi.EventRecoveryFailed:
			select {
			case ch <- e.Err:
			default:
			}
		}
	})
	return crashes, ch, cancel
}

// describe collects what info prints from a powered-up controller.
func describe(device string, t *target) (*infoOut, error) {
	p := t.c.Profile()
	bar, err := t.dev.BAR(0)
	if err != nil {
		return nil, err
	}
	ver := bar.Read32(mhi.RegMHIVER)
	st, ee, mission := t.c.State()
	out := &infoOut{
		Device:       device,
		PCI:          t.dev.Info().String(),
		Profile:      p.Name,
		Model:        p.Description,
		MHIVersion:   fmt.Sprintf("%d.%d (%#08x)", ver>>24, ver>>16&0xFF, ver),
		SOCHWVersion: fmt.Sprintf("%#08x", bar.Read32(mhi.RegSOCHWVersion)),
		EE:           ee.String(),
		State:        st.String(),
		MissionMode:  mission,
		SerialNumber: fmt.Sprintf("%#08x", t.c.SerialNumber()),
		MRU:          p.MRU,
		Stats:        t.c.Stats(),
		Firmware:     firmwareInfo{Image: p.FirmwareImage, EDLImage: p.EDLImage, EDLTrigger: p.EDLTrigger},
	}
	for _, ch := range p.Channels {
		out.Channels = append(out.Channels, chanInfo{
			Num: ch.Num, Name: ch.Name, Dir: dirName(ch.Dir), Elements: ch.Elements,
			EventRing: ch.EventRing, EE: eeNames(ch.EE), Burst: ch.Burst,
		})
	}
	for i, er := range p.EventRings {
		out.EventRings = append(out.EventRings, ringInfo{
			Index: i, Kind: ringKindName(er.Kind), Elements: er.Elements, IntModMs: er.IntModMs, Channel: er.Channel,
		})
	}
	return out, nil
}

func printInfo(w io.Writer, o *infoOut) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "device\t%s\t%s\n", o.Device, o.PCI)
	fmt.Fprintf(tw, "profile\t%s\t%s\n", o.Profile, o.Model)
	fmt.Fprintf(tw, "MHI version\t%s\n", o.MHIVersion)
	fmt.Fprintf(tw, "SoC HW version\t%s\n", o.SOCHWVersion)
	fmt.Fprintf(tw, "EE\t%s\n", o.EE)
	fmt.Fprintf(tw, "state\t%s\n", o.State)
	fmt.Fprintf(tw, "mission mode\t%v\n", o.MissionMode)
	fmt.Fprintf(tw, "serial number\t%s\n", o.SerialNumber)
	fmt.Fprintf(tw, "MRU\t%d\n", o.MRU)
	fmt.Fprintf(tw, "crashes\t%d\n", o.Crashes)
	tw.Flush()
	fmt.Fprintln(w, "\nchannels:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CH\tNAME\tDIR\tELEMENTS\tER\tEE\tBURST")
	for _, ch := range o.Channels {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d\t%s\t%v\n", ch.Num, ch.Name, ch.Dir, ch.Elements, ch.EventRing, strings.Join(ch.EE, ","), ch.Burst)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nevent rings:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ER\tKIND\tELEMENTS\tINTMOD\tCHANNEL")
	for _, er := range o.EventRings {
		ch := "-"
		if er.Channel >= 0 {
			ch = fmt.Sprint(er.Channel)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%dms\t%s\n", er.Index, er.Kind, er.Elements, er.IntModMs, ch)
	}
	tw.Flush()
}
