package simnet

import (
	"math"
	"slices"
	"time"
)

// Schedule plays the cell's measurements over time, counted from the
// moment the modem registers: step i holds from Steps[i].At until the
// next step's At (before the first, the Cell's own values hold), the last
// for good or, with Period, until Period has passed, when the schedule
// starts over. A new registration starts it over too. Drift, if set,
// moves the signal on top of the schedule. Every change is reported as
// signal changes are (MBIM SIGNAL_STATE indication); QMI's Get Signal
// Info, RF Band and CA Info, MBIM's SIGNAL_STATE and BASE_STATIONS_INFO,
// and +CSQ/+COPS all read the step in force.
type Schedule struct {
	Steps []Step
	// Period, when longer than the last step's At, repeats the steps
	// every Period.
	Period time.Duration
}

// Step is one stretch of a Schedule: the RATs the modem is on and their
// measurements (nil: not on that RAT; both nil: the Cell's), and the
// component carriers (nil: the Cell's).
type Step struct {
	At         time.Duration
	LTE, NR    *Measurement
	Components []Component
}

// sorted returns the steps in time order (a schedule's steps are played
// in that order whatever order they were given in).
func (s *Schedule) sorted() []Step {
	steps := slices.Clone(s.Steps)
	slices.SortStableFunc(steps, func(a, b Step) int { return int(a.At - b.At) })
	return steps
}

// startScheduleLocked plays the schedule from its start (on
// registration); timers of an earlier start do nothing.
func (n *Network) startScheduleLocked() {
	st := &n.st
	st.schedGen++
	st.step = 0
	if len(n.cfg.Cell.Schedule.Steps) > 0 {
		n.scheduleRoundLocked(st.schedGen)
	}
}

// scheduleRoundLocked arms one round of steps, and the next round when
// the schedule repeats.
func (n *Network) scheduleRoundLocked(gen uint64) {
	sc := &n.cfg.Cell.Schedule
	for i, s := range sc.Steps {
		n.afterLocked(s.At, func() { n.stepLocked(gen, i) })
	}
	if last := sc.Steps[len(sc.Steps)-1].At; sc.Period > last {
		n.afterLocked(sc.Period, func() {
			if gen == n.st.schedGen && n.st.reg.Registered() {
				n.scheduleRoundLocked(gen)
			}
		})
	}
}

// stepLocked puts step i in force and reports the new signal.
func (n *Network) stepLocked(gen uint64, i int) {
	st := &n.st
	if gen != st.schedGen || !st.reg.Registered() {
		return
	}
	st.step = i + 1
	st.signal.RSSI = n.rssiLocked()
	n.eventLocked(evSignal, 0)
}

// baseLocked is the cell before drift: the step in force, else the
// configured cell.
func (n *Network) baseLocked() (lte, nr *Measurement, comps []Component) {
	c := &n.cfg.Cell
	lte, nr, comps = c.LTE, c.NR, c.Components
	if i := n.st.step - 1; i >= 0 && i < len(c.Schedule.Steps) {
		s := &c.Schedule.Steps[i]
		if s.LTE != nil || s.NR != nil {
			lte, nr = s.LTE, s.NR
		}
		if s.Components != nil {
			comps = s.Components
		}
	}
	return lte, nr, comps
}

// rssiLocked is the coded RSSI of a registered modem: baseRSSI moved by
// the drift and by how far the step in force put the primary RAT's RSRP
// from the configured cell's, 2 dB per step.
func (n *Network) rssiLocked() uint32 {
	off := n.st.drift
	lte, nr, _ := n.baseLocked()
	c := &n.cfg.Cell
	switch {
	case lte != nil && c.LTE != nil:
		off += lte.RSRP - c.LTE.RSRP
	case lte == nil && nr != nil && c.NR != nil:
		off += nr.RSRP - c.NR.RSRP
	}
	return uint32(max(0, min(31, baseRSSI+int(math.Round(off/2)))))
}
