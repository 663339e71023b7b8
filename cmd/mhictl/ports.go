package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mhistack/mhistack/link/at"
	"github.com/mhistack/mhistack/link/nmea"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// The AT and GNSS ports: mhictl at sends one command on the profile's AT
// pair (DUN, else DUN2) and prints the answer; mhictl gnss prints the
// NMEA pair's sentences.

func init() {
	register(&command{
		Name:  "at",
		Short: "Send one AT command on the modem's AT port and print the answer.",
		Summary: `Power the modem up, open its AT port (the DUN channel pair, or DUN2; the
port Linux's mhi_wwan_ctrl shows as /dev/wwan0at0), send COMMAND and print
the answer's lines up to the final result code: OK, or ERROR / +CME ERROR:
<err> (3GPP TS 27.007 §9.2), which make mhictl exit 1. -reply bounds the
wait. A profile without an AT port is an error (mhictl info lists a
modem's channels). With -device sim the emulated modem answers AT, ATI,
AT+CGMI, AT+CGMM, AT+CGMR, AT+CSQ, AT+COPS?, AT+CPIN?, AT+CFUN? and
ERROR to anything else; -profile must name a modem with an AT port
(quectel-em1xx, say).`,
		Run: atCommand,
	})
	register(&command{
		Name:  "gnss",
		Short: "Print the NMEA sentences of the modem's GNSS port.",
		Summary: `Power the modem up, open its NMEA channel pair and print every NMEA 0183
sentence whose checksum holds, until -n sentences or until interrupted
(Ctrl-C); sentences with a bad checksum or syntax are counted and
reported on stderr at the end, not printed. -timeout bounds the power-up
only. The GNSS receiver must be running: on Quectel modules AT+QGPS=1 on
the AT port starts it. With -device sim the emulated receiver sends GGA,
RMC and GSV once a second from -sim-position; -profile must name a modem
with an NMEA pair (quectel-em1xx, say).`,
		Run: gnssCommand,
	})
}

// portBuffers is what a ControlPort allocates: 4 RX and 4 TX buffers of
// ControlMTU (mhi.ControlOptions' defaults).
var portBuffers = 8 * mhi.DMAFootprint(mhi.ControlMTU, 64)

// openPort powers the modem up and opens the pair pick names on its
// profile; what names the kind of port for the error when there is none.
func openPort(ctx context.Context, df *deviceFlags, so sim.Options, what string, pick func(*mhi.Profile) (string, bool), stderr io.Writer) (*target, *mhi.ControlPort, error) {
	if df.device == "sim" {
		if _, ok := pick(df.simProfile()); !ok {
			return nil, nil, fmt.Errorf("profile %s has no %s port; emulate a modem that has one with -profile (quectel-em1xx has both AT and NMEA)", df.simProfile().Name, what)
		}
	}
	t, err := df.open(so, mhi.Options{Boot: waitProgress(stderr)}, mhi.DMAUse{}, portBuffers)
	if err != nil {
		return nil, nil, err
	}
	name, ok := pick(t.c.Profile())
	if !ok {
		t.close()
		return nil, nil, fmt.Errorf("profile %s has no %s port (mhictl info lists its channels)", t.c.Profile().Name, what)
	}
	if err := t.c.PowerUp(ctx); err != nil {
		t.close()
		return nil, nil, hint(fmt.Errorf("power up: %w", err))
	}
	p, err := t.c.OpenControl(ctx, name, mhi.ControlOptions{})
	if err != nil {
		t.close()
		return nil, nil, hint(fmt.Errorf("open %s: %w", name, err))
	}
	return t, p, nil
}

type atOut struct {
	Command string   `json:"command"`
	Lines   []string `json:"lines"`
	Final   string   `json:"final"`
}

func atCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["at"]
	fs := newFlagSet(c, "[-device sim|ADDRESS|vfio-user:PATH] [flags] COMMAND", stderr)
	df := addDeviceFlags(fs)
	reply := fs.Duration("reply", 10*time.Second, "how long to wait for the final result code after sending")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one AT command, e.g. mhictl at 'AT+CSQ'")
	}
	cmd := strings.TrimSpace(fs.Arg(0))
	if err := at.CheckCommand(cmd); err != nil {
		return usagef("%v", err)
	}
	if *reply <= 0 {
		return usagef("-reply must be positive")
	}
	if err := df.check(); err != nil {
		return err
	}
	var so sim.Options
	if df.device == "sim" {
		if name, ok := df.simProfile().ATChannel(); ok {
			so.Functions = map[string]sim.Function{name: simnet.NewATFunction(nil)}
		}
	}
	octx, cancel := df.context(ctx)
	defer cancel()
	t, p, err := openPort(octx, df, so, "AT", (*mhi.Profile).ATChannel, stderr)
	if err != nil {
		return err
	}
	defer t.close()
	defer p.Close()
	rctx, rcancel := context.WithTimeout(ctx, *reply)
	defer rcancel()
	resp, err := at.Command(rctx, p, &at.Reader{}, cmd)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: no final result code (OK, ERROR) within -reply %v", cmd, *reply)
	case err != nil && !errors.Is(err, at.ErrCommand):
		return fmt.Errorf("%s: %w", cmd, err)
	}
	out := atOut{Command: cmd, Lines: resp.Lines, Final: resp.Final}
	if out.Lines == nil {
		out.Lines = []string{}
	}
	if df.json {
		if jerr := writeJSON(stdout, out); jerr != nil {
			return jerr
		}
	} else {
		for _, l := range resp.Lines {
			fmt.Fprintln(stdout, l)
		}
		fmt.Fprintln(stdout, resp.Final)
	}
	return err
}

// positionFlag is -sim-position LAT,LON[,ALT].
type positionFlag struct{ cfg simnet.GNSSConfig }

func (f *positionFlag) String() string { return "" }

func (f *positionFlag) Set(v string) error {
	p := strings.Split(v, ",")
	if len(p) < 2 || len(p) > 3 {
		return errors.New("want LAT,LON or LAT,LON,ALT in degrees and metres")
	}
	var x [3]float64
	for i, s := range p {
		var err error
		if x[i], err = strconv.ParseFloat(strings.TrimSpace(s), 64); err != nil {
			return fmt.Errorf("%q: %w", s, err)
		}
	}
	if x[0] < -90 || x[0] > 90 || x[1] < -180 || x[1] > 180 || x[2] < -1000 || x[2] > 100000 {
		return fmt.Errorf("%q: latitude -90..90, longitude -180..180, altitude -1000..100000 m", v)
	}
	f.cfg.Latitude, f.cfg.Longitude, f.cfg.Altitude = x[0], x[1], x[2]
	return nil
}

func gnssCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["gnss"]
	fs := newFlagSet(c, "[-device sim|ADDRESS|vfio-user:PATH] [-n COUNT] [flags]", stderr)
	df := addDeviceFlags(fs)
	count := fs.Int("n", 0, "stop after `COUNT` valid sentences (0: until interrupted)")
	var pos positionFlag
	fs.Var(&pos, "sim-position", "-device sim: the emulated receiver's `LAT,LON[,ALT]` (degrees, metres; default 48.1173,11.5167,545)")
	if err := parseNoArgs(fs, args, df.check); err != nil {
		return err
	}
	if *count < 0 {
		return usagef("-n must be 0 or more")
	}
	var so sim.Options
	if df.device == "sim" {
		if name, ok := df.simProfile().NMEAChannel(); ok {
			so.Functions = map[string]sim.Function{name: simnet.NewGNSSFunction(pos.cfg)}
		}
	}
	octx, cancel := df.context(ctx)
	defer cancel()
	t, p, err := openPort(octx, df, so, "NMEA", (*mhi.Profile).NMEAChannel, stderr)
	if err != nil {
		return err
	}
	defer t.close()
	defer p.Close()
	st, err := streamNMEA(ctx, p.Recv, *count, stdout)
	fmt.Fprintf(stderr, "mhictl gnss: %d sentences, %d with a bad checksum, %d malformed, %d stray bytes\n", st.Sentences, st.BadChecksum, st.Malformed, st.Stray)
	return err
}

// streamNMEA prints the valid sentences recv delivers until count of
// them (0: no limit) or until ctx is cancelled (not an error); the others
// are counted (nmea.Reader).
func streamNMEA(ctx context.Context, recv func(context.Context) ([]byte, error), count int, stdout io.Writer) (nmea.ReaderStats, error) {
	r := nmea.Reader{Recv: recv}
	for count == 0 || r.Stats().Sentences < uint64(count) {
		line, _, err := r.Next(ctx)
		if err != nil {
			if errors.Is(ctx.Err(), context.Canceled) {
				return r.Stats(), nil
			}
			return r.Stats(), err
		}
		fmt.Fprintln(stdout, line)
	}
	return r.Stats(), nil
}

var _ flag.Value = (*positionFlag)(nil)
