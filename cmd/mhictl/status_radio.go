package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// radioOut is status's radio section (stack.RadioStatus), inlined in
// statusOut's JSON.
type radioOut struct {
	OperatorName string       `json:"operator_name,omitempty"`
	RAT          string       `json:"rat"`
	Bands        []string     `json:"bands"`
	Carriers     []carrierOut `json:"carriers"`
	LTE          *signalOut   `json:"lte,omitempty"`
	NR           *signalOut   `json:"nr,omitempty"`
	SIMState     string       `json:"sim_state,omitempty"`
}

type carrierOut struct {
	Band         string  `json:"band"`
	PCI          uint16  `json:"pci"`
	EARFCN       uint32  `json:"earfcn"`            // LTE carriers
	NRARFCN      uint32  `json:"nrarfcn,omitempty"` // NR carriers (MBIMEx 3.0 serving cells); earfcn is 0
	BandwidthMHz float64 `json:"bandwidth_mhz"`
	Role         string  `json:"role"` // "primary" or "secondary"
	State        string  `json:"state,omitempty"`
}

type signalOut struct {
	RSRP float64  `json:"rsrp_dbm"`
	RSRQ *float64 `json:"rsrq_db,omitempty"`
	SINR float64  `json:"sinr_db"`
}

// collectRadio fills status's radio section from the modem.
func collectRadio(ctx context.Context, s *stack.Stack) (radioOut, error) {
	r, err := s.RadioStatus(ctx)
	if err != nil {
		return radioOut{}, err
	}
	o := radioOut{OperatorName: r.OperatorName, RAT: r.RAT, Bands: r.Bands, Carriers: []carrierOut{}, SIMState: r.SIM,
		LTE: signalOf(r.LTE), NR: signalOf(r.NR)}
	if o.Bands == nil {
		o.Bands = []string{}
	}
	for _, c := range r.Carriers {
		role := "secondary"
		if c.Primary {
			role = "primary"
		}
		co := carrierOut{Band: c.Band, PCI: c.PCI, EARFCN: c.Channel, BandwidthMHz: c.BandwidthMHz, Role: role, State: c.State}
		if strings.HasPrefix(c.Band, "n") {
			co.EARFCN, co.NRARFCN = 0, c.Channel
		}
		o.Carriers = append(o.Carriers, co)
	}
	return o, nil
}

func signalOf(s *stack.Signal) *signalOut {
	if s == nil {
		return nil
	}
	o := &signalOut{RSRP: s.RSRP, SINR: s.SINR}
	if s.HasRSRQ {
		v := s.RSRQ
		o.RSRQ = &v
	}
	return o
}

// printRadio prints the radio section's lines; the operator's name only
// when it is not the provider name status printed already.
func printRadio(w io.Writer, o *radioOut, provider string) {
	if o.OperatorName != "" && o.OperatorName != provider {
		fmt.Fprintf(w, "operator name\t%s\n", o.OperatorName)
	}
	fmt.Fprintf(w, "rat\t%s\n", orDash(nonEmpty(o.RAT)))
	fmt.Fprintf(w, "bands\t%s\n", orDash(o.Bands))
	for _, c := range o.Carriers {
		cc := fmt.Sprintf("%s, PCI %d, EARFCN %d", c.Band, c.PCI, c.EARFCN)
		if c.NRARFCN != 0 {
			cc = fmt.Sprintf("%s, PCI %d, NR-ARFCN %d", c.Band, c.PCI, c.NRARFCN)
		}
		if c.BandwidthMHz > 0 { // MBIM does not say
			cc += fmt.Sprintf(", %g MHz", c.BandwidthMHz)
		}
		if c.State != "" {
			cc += ", " + c.State
		}
		fmt.Fprintf(w, "carrier\t%s\t%s\n", c.Role, cc)
	}
	for _, s := range []struct {
		rat string
		v   *signalOut
	}{{"LTE", o.LTE}, {"NR", o.NR}} {
		if s.v == nil {
			continue
		}
		q := "RSRQ ?"
		if s.v.RSRQ != nil {
			q = fmt.Sprintf("RSRQ %g dB", *s.v.RSRQ)
		}
		fmt.Fprintf(w, "%s signal\tRSRP %g dBm, %s, SINR %g dB\n", s.rat, s.v.RSRP, q, s.v.SINR)
	}
	if o.SIMState != "" {
		fmt.Fprintf(w, "SIM card\t%s\n", o.SIMState)
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// simCellFlag is -sim-cell: the emulated serving cell.
type simCellFlag struct {
	cell simnet.Cell
	set  bool
}

const simCellUsage = "-device sim: the emulated serving cell, comma-separated `KEY=VALUE`s:\n" +
	"lte=RSRP/RSRQ/SINR and nr=RSRP/RSRQ/SINR (dBm/dB/dB; both: EN-DC), bands=B3+B7+n78 (the\n" +
	"component carriers, primary first), drift=SEED/INTERVAL (a seeded random walk of the signal\n" +
	"every INTERVAL, e.g. 7/1s); default lte=-93/-9/13,bands=B3"

func (f *simCellFlag) String() string { return "" }

func (f *simCellFlag) Set(v string) error {
	c, err := parseSimCell(v)
	if err != nil {
		return err
	}
	f.cell, f.set = c, true
	return nil
}

// parseSimCell parses -sim-cell's value.
func parseSimCell(v string) (simnet.Cell, error) {
	var c simnet.Cell
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return c, fmt.Errorf("%q: want KEY=VALUE", kv)
		}
		switch k {
		case "lte", "nr":
			m, err := parseMeasurement(val)
			if err != nil {
				return c, fmt.Errorf("%s: %w", k, err)
			}
			if k == "lte" {
				c.LTE = m
			} else {
				c.NR = m
			}
		case "bands":
			for i, b := range strings.Split(val, "+") {
				cc, err := componentOf(b, i)
				if err != nil {
					return c, err
				}
				c.Components = append(c.Components, cc)
			}
		case "drift":
			s, iv, ok := strings.Cut(val, "/")
			seed, err1 := strconv.ParseUint(s, 10, 64)
			d, err2 := time.ParseDuration(iv)
			if !ok || err1 != nil || err2 != nil || d <= 0 {
				return c, fmt.Errorf("drift=%q: want SEED/INTERVAL, e.g. 7/1s", val)
			}
			c.Drift.Seed, c.Drift.Interval = seed, d
		default:
			return c, fmt.Errorf("unknown key %q (want lte, nr, bands, drift)", k)
		}
	}
	return c, nil
}

func parseMeasurement(v string) (*simnet.Measurement, error) {
	p := strings.Split(v, "/")
	if len(p) != 3 {
		return nil, fmt.Errorf("%q: want RSRP/RSRQ/SINR", v)
	}
	var f [3]float64
	lim := [3][2]float64{{-156, -31}, {-43, 20}, {-23, 40}} // MBIMEx and TS 38.133 reporting ranges
	for i, s := range p {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || x < lim[i][0] || x > lim[i][1] {
			return nil, fmt.Errorf("%q: value %d (%q) not a number in %g..%g", v, i+1, s, lim[i][0], lim[i][1])
		}
		f[i] = x
	}
	return &simnet.Measurement{RSRP: f[0], RSRQ: f[1], SINR: f[2]}, nil
}

// componentOf makes carrier i of -sim-cell bands= from "B3" or "n78",
// with a channel in the band and a typical bandwidth.
func componentOf(b string, i int) (simnet.Component, error) {
	nr := strings.HasPrefix(b, "n")
	if !nr && !strings.HasPrefix(b, "B") {
		return simnet.Component{}, fmt.Errorf("band %q: want B<n> (LTE) or n<n> (NR)", b)
	}
	n, err := strconv.Atoi(b[1:])
	if err != nil || n <= 0 || n > 512 {
		return simnet.Component{}, fmt.Errorf("band %q: want B<n> (LTE) or n<n> (NR)", b)
	}
	// A channel in the band, so that a host reading the EARFCN or
	// NR-ARFCN (MBIM BASE_STATIONS_INFO) finds the same band.
	c := simnet.Component{NR: nr, Band: n, PCI: uint16(101 + i), BandwidthMHz: 20}
	ok := false
	if nr {
		c.BandwidthMHz = 100
		c.Channel, ok = mbim.NRARFCNOfBand(n)
	} else {
		c.Channel, ok = mbim.LTEEARFCNOfBand(n)
	}
	if !ok {
		return simnet.Component{}, fmt.Errorf("band %q: not a band the emulator knows", b)
	}
	return c, nil
}

// addSimRadioFlags adds the emulated radio's flags.
func addSimRadioFlags(fs *flag.FlagSet, f *sessionFlags) {
	fs.StringVar(&f.simOperator, "sim-operator", "", "-device sim: the emulated network's `name` (sent GSM 7-bit when the GSM default alphabet has\n"+
		"every character, else UCS2; default mhistack)")
	fs.Var(&f.simCell, "sim-cell", simCellUsage)
}
