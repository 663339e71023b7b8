package simnet

import (
	"math"
	"math/rand/v2"
	"time"
)

// Cell is the serving cell as the emulated modem measures it: the RATs
// it is on, their signal, the component carriers, and how the signal
// drifts. NetworkConfig.Cell configures it; the zero value is LTE band 3
// at RSRP −93 dBm, RSRQ −9 dB, SINR 13 dB, steady.
type Cell struct {
	// LTE and NR are the measurements on each RAT; nil: not on that RAT.
	// Both set is EN-DC (5G NSA).
	LTE, NR *Measurement
	// Components are the component carriers, the primary cell first;
	// more than one is carrier aggregation.
	Components []Component
	// Drift moves the signal over time, randomly; Schedule plays
	// measurements, RATs and carriers set in advance (both may be set:
	// the drift moves the scheduled values).
	Drift    Drift
	Schedule Schedule
}

// Measurement is a RAT's signal: RSRP (dBm), RSRQ (dB), SINR (dB).
type Measurement struct {
	RSRP, RSRQ, SINR float64
}

// Component is one component carrier.
type Component struct {
	NR      bool   // an NR carrier (else LTE)
	Band    int    // 3GPP band number: 3 is B3 (or n3 when NR)
	Channel uint32 // EARFCN or NR-ARFCN
	PCI     uint16
	// BandwidthMHz is the carrier's bandwidth: LTE 1.4 (as 1), 3, 5, 10,
	// 15, 20; NR 5 to 400.
	BandwidthMHz int
}

// Drift is a deterministic slow random walk of the signal: every
// Interval, an offset moves by at most Step dB (default 1), kept within
// ±Range dB (default 6) of the configured values, drawn from a PCG seeded
// with Seed, so a seed replays the same walk. RSRP, SINR and RSSI move by
// the offset, RSRQ by a quarter of it. Interval 0: no drift.
type Drift struct {
	Seed        uint64
	Interval    time.Duration
	Step, Range float64
}

// DefaultCell is the zero Cell's meaning. A Cell with measurements but
// no Components gets this one's B3 carrier (n78, 100 MHz, when on NR
// alone).
func DefaultCell() Cell {
	return Cell{
		LTE:        &Measurement{RSRP: -93, RSRQ: -9, SINR: 13},
		Components: []Component{{Band: 3, Channel: 1300, PCI: 101, BandwidthMHz: 20}},
	}
}

func (c *Cell) setDefaults() {
	if c.LTE == nil && c.NR == nil {
		c.LTE = DefaultCell().LTE
	}
	if len(c.Components) == 0 {
		// A cell on a RAT has a carrier on it: B3 on LTE (the
		// anchor, with EN-DC), else n78.
		c.Components = DefaultCell().Components
		if c.LTE == nil {
			c.Components = []Component{{NR: true, Band: 78, Channel: 636666, PCI: 101, BandwidthMHz: 100}}
		}
	}
	if c.Drift.Step <= 0 {
		c.Drift.Step = 1
	}
	if c.Drift.Range <= 0 {
		c.Drift.Range = 6
	}
	c.Schedule.Steps = c.Schedule.sorted()
}

// CellState is what the modem measures now.
type CellState struct {
	// Registered: without registration nothing is measured and the
	// rest is zero.
	Registered bool
	// RSSIdBm is the received signal strength (−113..−51, as +CSQ and
	// MBIM SIGNAL_STATE code it).
	RSSIdBm    int
	LTE, NR    *Measurement
	Components []Component
}

// Cell returns what the modem measures now.
func (n *Network) Cell() CellState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cellLocked()
}

func (n *Network) cellLocked() CellState {
	st := &n.st
	if !st.reg.Registered() || st.signal.RSSI == 99 {
		return CellState{}
	}
	lte, nr, comps := n.baseLocked()
	at := func(m *Measurement) *Measurement {
		if m == nil {
			return nil
		}
		return &Measurement{RSRP: m.RSRP + st.drift, RSRQ: m.RSRQ + st.drift/4, SINR: m.SINR + st.drift}
	}
	return CellState{Registered: true, RSSIdBm: -113 + 2*int(min(st.signal.RSSI, 31)), LTE: at(lte), NR: at(nr),
		Components: append([]Component(nil), comps...)}
}

// baseRSSI is the coded RSSI of a registered modem before drift: 20,
// −73 dBm.
const baseRSSI = 20

// startDriftLocked arms the walk's next step (on registration).
func (n *Network) startDriftLocked() {
	d := n.cfg.Cell.Drift
	if d.Interval <= 0 || n.st.drifting {
		return
	}
	n.st.drifting = true
	n.afterLocked(d.Interval, n.driftLocked)
}

// driftLocked moves the walk one step, indicates the new signal and arms
// the next step while the modem stays registered.
func (n *Network) driftLocked() {
	st, d := &n.st, n.cfg.Cell.Drift
	if !st.reg.Registered() {
		st.drifting = false
		return
	}
	if st.walk == nil {
		st.walk = newDriftWalk(d.Seed)
	}
	st.drift = st.walk.next(d)
	st.signal.RSSI = n.rssiLocked()
	n.eventLocked(evSignal, 0)
	n.afterLocked(d.Interval, n.driftLocked)
}

// driftWalk is the walk of a seed: its k-th offset depends on the seed
// and k only.
type driftWalk struct {
	r     *rand.Rand
	off   float64
	steps int
}

func newDriftWalk(seed uint64) *driftWalk {
	return &driftWalk{r: rand.New(rand.NewPCG(seed, 0x6d686973))}
}

// next moves the offset by at most d.Step, within ±d.Range, to 0.1 dB.
func (w *driftWalk) next(d Drift) float64 {
	w.steps++
	w.off = math.Round(max(-d.Range, min(d.Range, w.off+(2*w.r.Float64()-1)*d.Step))*10) / 10
	return w.off
}
