package stack_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// openRadio opens the in-process emulated modem over control (mbim or
// qmi) on a network with cell; noMBIMEx makes its MBIM function one of
// MBIM 1.0 only.
func openRadio(t *testing.T, control string, cell simnet.Cell, noMBIMEx bool) *stack.Stack {
	t.Helper()
	return openRadioMBIM(t, control, cell, simnet.MBIMConfig{NoMBIMEx: noMBIMEx})
}

// openRadioMBIM is openRadio with the MBIM function's configuration.
func openRadioMBIM(t *testing.T, control string, cell simnet.Cell, mc simnet.MBIMConfig) *stack.Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	so := stack.SimOptions{
		Modem:         sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
		NetworkConfig: simnet.NetworkConfig{Cell: cell},
		MBIM:          mc,
	}
	s, err := stack.Open(ctx, stack.Options{APN: "internet", Control: control, Sim: so})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func radioStatus(t *testing.T, s *stack.Stack) stack.RadioStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := s.RadioStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRadioStatusOverMBIMSaysWhatQMISays: the same emulated cell read
// over MBIM (MBIMEx 3.0: 2.0 SIGNAL_STATE and 3.0 BASE_STATIONS_INFO) and
// over QMI (NAS) gives the same RAT, bands, primary cell, NR RSRQ, and the
// same signal within MBIMEx's 1 dB (RSRP) and 0.5 dB (SINR) steps.
func TestRadioStatusOverMBIMSaysWhatQMISays(t *testing.T) {
	cell := simnet.Cell{
		LTE: &simnet.Measurement{RSRP: -101, RSRQ: -12, SINR: 7.5},
		NR:  &simnet.Measurement{RSRP: -88, RSRQ: -11, SINR: 18.2},
		Components: []simnet.Component{{Band: 7, Channel: 3100, PCI: 55, BandwidthMHz: 20},
			{NR: true, Band: 78, Channel: 636666, PCI: 9, BandwidthMHz: 100}},
	}
	ms := openRadio(t, "mbim", cell, false)
	m := radioStatus(t, ms)
	q := radioStatus(t, openRadio(t, "qmi", cell, false))
	if v := ms.MBIM().MBIMEx(); v != 0x0300 {
		t.Errorf("MBIMEx = %v, want 3.0", v)
	}
	if m.RAT != "lte+nr" || m.RAT != q.RAT {
		t.Errorf("RAT: MBIM %q, QMI %q; want lte+nr on both", m.RAT, q.RAT)
	}
	if !slices.Equal(m.Bands, []string{"B7", "n78"}) || !slices.Contains(q.Bands, "B7") || !slices.Contains(q.Bands, "n78") {
		t.Errorf("bands: MBIM %v, QMI %v; want B7 and n78 on both", m.Bands, q.Bands)
	}
	if len(m.Carriers) != 2 || len(q.Carriers) == 0 {
		t.Fatalf("carriers: MBIM %+v, QMI %+v", m.Carriers, q.Carriers)
	}
	mc, qc := m.Carriers[0], q.Carriers[0]
	if !mc.Primary || mc.Band != qc.Band || mc.PCI != qc.PCI || mc.Channel != qc.Channel {
		t.Errorf("primary cell: MBIM %+v, QMI %+v", mc, qc)
	}
	if nc := m.Carriers[1]; nc.Primary || nc.Band != "n78" || nc.PCI != 9 || nc.Channel != 636666 {
		t.Errorf("NR cell: MBIM %+v, want n78 PCI 9 NR-ARFCN 636666", nc)
	}
	if m.LTE == nil || q.LTE == nil || m.NR == nil || q.NR == nil {
		t.Fatalf("signal: MBIM LTE %v NR %v, QMI LTE %v NR %v", m.LTE, m.NR, q.LTE, q.NR)
	}
	near := func(a, b, step float64) bool { return math.Abs(a-b) < step }
	for _, c := range []struct {
		rat  string
		m, q *stack.Signal
	}{{"LTE", m.LTE, q.LTE}, {"NR", m.NR, q.NR}} {
		if !near(c.m.RSRP, c.q.RSRP, 1) || !near(c.m.SINR, c.q.SINR, 0.5) {
			t.Errorf("%s: MBIM %+v, QMI %+v", c.rat, *c.m, *c.q)
		}
	}
	if !m.LTE.HasRSRQ || m.LTE.RSRQ != q.LTE.RSRQ || m.LTE.RSRQ != -12 {
		t.Errorf("LTE RSRQ: MBIM %+v, QMI %+v; want -12 on both", *m.LTE, *q.LTE)
	}
	if !m.NR.HasRSRQ || !q.NR.HasRSRQ || m.NR.RSRQ != q.NR.RSRQ || m.NR.RSRQ != -11 {
		t.Errorf("NR RSRQ: MBIM %+v, QMI %+v; want -11 on both", *m.NR, *q.NR)
	}
	if m.SIM != "ready" || m.OperatorName == "" {
		t.Errorf("MBIM SIM %q, operator %q", m.SIM, m.OperatorName)
	}
}

// TestRadioStatusOverMBIMEx2HasNoNRCells: a modem that agrees to MBIMEx
// 2.0 only gives NR's RSRP and SINR (SIGNAL_STATE) but no NR RSRQ, band or
// carrier: those are in BASE_STATIONS_INFO's 3.0 layout.
func TestRadioStatusOverMBIMEx2HasNoNRCells(t *testing.T) {
	cell := simnet.Cell{
		LTE: &simnet.Measurement{RSRP: -101, RSRQ: -12, SINR: 7.5},
		NR:  &simnet.Measurement{RSRP: -88, RSRQ: -11, SINR: 18},
		Components: []simnet.Component{{Band: 7, Channel: 3100, PCI: 55, BandwidthMHz: 20},
			{NR: true, Band: 78, Channel: 636666, PCI: 9, BandwidthMHz: 100}},
	}
	s := openRadioMBIM(t, "mbim", cell, simnet.MBIMConfig{MaxMBIMEx: 0x0200})
	r := radioStatus(t, s)
	if r.NR == nil || r.NR.RSRP != -88 || r.NR.HasRSRQ || !slices.Equal(r.Bands, []string{"B7"}) || len(r.Carriers) != 1 {
		t.Errorf("RadioStatus on an MBIMEx 2.0 modem = %+v (NR %+v)", r, r.NR)
	}
	if v := s.MBIM().MBIMEx(); v != 0x0200 {
		t.Errorf("MBIMEx = %v, want 2.0", v)
	}
}

// TestRadioStatusOverMBIM1LeavesTheSignalEmpty: a modem without the
// Microsoft extensions still gives registration, RAT (its data class)
// and SIM, and no error.
func TestRadioStatusOverMBIM1LeavesTheSignalEmpty(t *testing.T) {
	s := openRadio(t, "mbim", simnet.Cell{}, true)
	r := radioStatus(t, s)
	if r.LTE != nil || r.NR != nil || len(r.Bands) != 0 || r.RAT == "" || r.SIM != "ready" {
		t.Errorf("RadioStatus on an MBIM 1.0 modem = %+v", r)
	}
	if v := s.MBIM().MBIMEx(); v != 0x0100 {
		t.Errorf("MBIMEx = %v, want 1.0", v)
	}
}

// TestRadioStatusFollowsTheSignalSchedule: the emulated cell plays a
// schedule (simnet.Schedule, what mhictl sim serve -signal sets) and
// RadioStatus, over MBIM and over QMI, reads each step: LTE alone at
// -80 dBm, then EN-DC with LTE at -110 dBm, over and over.
func TestRadioStatusFollowsTheSignalSchedule(t *testing.T) {
	good := &simnet.Measurement{RSRP: -80, RSRQ: -8, SINR: 20}
	edge := &simnet.Measurement{RSRP: -110, RSRQ: -15, SINR: 0}
	nr := &simnet.Measurement{RSRP: -100, RSRQ: -12, SINR: 6}
	cell := simnet.Cell{LTE: good, Schedule: simnet.Schedule{Period: 300 * time.Millisecond, Steps: []simnet.Step{
		{At: 0, LTE: good}, {At: 150 * time.Millisecond, LTE: edge, NR: nr}}}}
	for _, control := range []string{"mbim", "qmi"} {
		t.Run(control, func(t *testing.T) {
			s := openRadio(t, control, cell, false)
			sawGood, sawEdge := false, false
			for deadline := time.Now().Add(30 * time.Second); !sawGood || !sawEdge; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("in 30 s: saw the -80 dBm step %v, the -110 dBm EN-DC step %v", sawGood, sawEdge)
				}
				r := radioStatus(t, s)
				switch {
				case r.LTE == nil:
					t.Fatalf("no LTE signal: %+v", r)
				case r.LTE.RSRP == -80 && r.NR == nil && r.RAT == "lte":
					sawGood = true
				case r.LTE.RSRP == -110 && r.NR != nil && r.NR.RSRP == -100 && r.RAT == "lte+nr":
					sawEdge = true
				case r.LTE.RSRP != -80 && r.LTE.RSRP != -110:
					t.Fatalf("LTE RSRP %v: not a step of the schedule", r.LTE.RSRP)
				}
				// Otherwise the step changed between two of
				// RadioStatus's queries: read again.
			}
		})
	}
}
