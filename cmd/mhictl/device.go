package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vfio"
	"github.com/mhistack/mhistack/mhi/pci/vfiouserclient"
	"github.com/mhistack/mhistack/mhi/sim"
)

// The flags and plumbing shared by the commands that drive one modem:
// -device sim (the emulated modem, in this process), a PCI address (a
// modem bound to vfio-pci) or vfio-user:PATH (a vfio-user server such as
// mhictl sim serve in another process), -profile, -json and -timeout.

// defaultSimProfile is the modem -device sim emulates without -profile:
// the same for every command (and for stack.Open and mhictl sim serve),
// so info and status describe the same modem. It has FIREHOSE and the
// EDL trigger; selftest loops IP_HW0 back on it (no LOOPBACK pair).
const defaultSimProfile = "qcom-sdx55m"

type deviceFlags struct {
	device  string
	profile string
	json    bool
	timeout time.Duration
}

func addDeviceFlags(fs *flag.FlagSet) *deviceFlags {
	f := &deviceFlags{}
	fs.StringVar(&f.device, "device", "sim", "`sim` for the emulated modem, the PCI address of a modem bound to vfio-pci (0000:01:00.0; see mhictl list), or vfio-user:PATH for a vfio-user server's UNIX socket (mhictl sim serve in another process)")
	fs.StringVar(&f.profile, "profile", "", "modem `profile` (mhi table name): what -device sim impersonates (default "+defaultSimProfile+"); for hardware it overrides matching by PCI IDs")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long")
	return f
}

// check validates the flags before anything is opened (usage errors).
func (f *deviceFlags) check() error {
	if f.profile != "" {
		if _, ok := mhi.Lookup(f.profile); !ok {
			return usagef("unknown profile %q (mhictl list -profiles names them)", f.profile)
		}
	}
	if path, ok := strings.CutPrefix(f.device, vfiouserclient.Prefix); ok {
		if path == "" {
			return usagef("-device vfio-user: needs the socket path (vfio-user:/run/modem.sock)")
		}
	} else if f.device != "sim" {
		if _, err := vfio.NormalizeAddress(f.device); err != nil {
			return usagef("-device: want sim, a PCI address like 0000:01:00.0 or vfio-user:PATH, got %q", f.device)
		}
	}
	return nil
}

func (f *deviceFlags) simProfile() *mhi.Profile {
	name := f.profile
	if name == "" {
		name = defaultSimProfile
	}
	p, _ := mhi.Lookup(name)
	return p
}

// target is an opened modem: its controller and, for -device sim, the
// emulated modem behind it. close powers it down and releases everything.
type target struct {
	c     *mhi.Controller
	modem *sim.Modem
	dev   pci.Device
	close func() error
}

// open builds the controller for the device the flags name. so applies to
// the emulated modem only. A modem's DMA arena is sized for the engine
// (mhi.DMASize with u: the firmware the command loads) plus extra bytes
// of the command's own buffers (each counted with mhi.DMAFootprint).
func (f *deviceFlags) open(so sim.Options, co mhi.Options, u mhi.DMAUse, extra int) (*target, error) {
	if f.device == "sim" {
		p := f.simProfile()
		dev, m, err := sim.NewDevice(p, so)
		if err != nil {
			return nil, err
		}
		co.Profile = p
		c, err := mhi.New(dev, co)
		if err != nil {
			dev.Close()
			return nil, err
		}
		return &target{c: c, modem: m, dev: dev, close: func() error {
			return errors.Join(c.Close(), dev.Close())
		}}, nil
	}
	sizeFor := func(info pci.Info) int {
		p := f.simProfile()
		if f.profile == "" {
			var ok bool
			if p, ok = mhi.Match(info.Vendor, info.Device, info.SubVendor, info.SubDev); !ok {
				return 0 // mhi.New says there is no profile
			}
		}
		return vfio.ArenaSize(mhi.DMASize(p, u) + extra)
	}
	var dev pci.Device
	if path, ok := strings.CutPrefix(f.device, vfiouserclient.Prefix); ok {
		d, err := vfiouserclient.Open(path, &vfiouserclient.Options{DMASizeFor: sizeFor})
		if err != nil {
			return nil, fmt.Errorf("open %s: %w (is mhictl sim serve -socket %s running?)", f.device, err, path)
		}
		dev = d
	} else {
		d, err := vfio.Open(f.device, &vfio.Options{DMASizeFor: sizeFor})
		if err != nil {
			return nil, fmt.Errorf("open %s: %w (mhictl list shows whether it is ready for vfio)", f.device, err)
		}
		dev = d
	}
	if f.profile != "" {
		co.Profile, _ = mhi.Lookup(f.profile)
	}
	c, err := mhi.New(dev, co)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return &target{c: c, dev: dev, close: func() error {
		return errors.Join(c.Close(), dev.Close())
	}}, nil
}

// context returns the command's context bounded by -timeout.
func (f *deviceFlags) context(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.timeout)
}

// writeJSON prints v indented.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// noArgs rejects positional arguments.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", strings.Join(fs.Args(), " "))
	}
	return nil
}

// hint adds what to do next to errors the user can act on.
func hint(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mhi.ErrCrashLoop):
		return fmt.Errorf("%w; the firmware crashes after every boot, as after a bad flash: write a good image through EDL with mhictl flash -programmer PROG -backup DIR rawprogram*.xml (docs/FLASHING.md, \"A bricked modem\")", err)
	case errors.Is(err, mhi.ErrTimeout):
		return fmt.Errorf("%w; the modem did not answer in time: check it is powered and not in a crash loop (dmesg), or raise -timeout", err)
	case errors.Is(err, mhi.ErrFirmware):
		return fmt.Errorf("%w; the modem rejected the image: check it is the right file for this modem", err)
	case errors.Is(err, mhi.ErrRemoved):
		return fmt.Errorf("%w; the device stopped answering: check lspci, then rebind it with hack/vfio-bind.sh", err)
	}
	return err
}

// eeNames lists the environments in an EE mask.
func eeNames(m mhi.EEMask) []string {
	var out []string
	for e := mhi.EE(0); e < 16; e++ {
		if m.Has(e) {
			out = append(out, e.String())
		}
	}
	return out
}

func dirName(t mhi.ChanType) string {
	switch t {
	case mhi.ChanTypeOutbound:
		return "UL"
	case mhi.ChanTypeInbound:
		return "DL"
	}
	return "?"
}

func ringKindName(k mhi.EventRingKind) string {
	switch k {
	case mhi.EventRingCtrl:
		return "ctrl"
	case mhi.EventRingData:
		return "data"
	case mhi.EventRingSWData:
		return "sw-data"
	case mhi.EventRingHWData:
		return "hw-data"
	}
	return "?"
}
