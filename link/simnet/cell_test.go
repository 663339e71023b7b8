package simnet

import (
	"math"
	"testing"
	"time"
)

// TestSignalDriftsDeterministicallyWithinItsRange: a seeded drift walks
// RSRP, SINR and RSSI away from the configured values, never leaving
// ±Range; the network's k-th step is the seed's k-th step, whatever the
// timing.
func TestSignalDriftsDeterministicallyWithinItsRange(t *testing.T) {
	d := Drift{Seed: 42, Interval: time.Millisecond, Step: 2, Range: 5}
	net := NewNetwork(NetworkConfig{Cell: Cell{Drift: d}})
	base := net.cfg.Cell.LTE
	fn := NewQMIFunction(QMIConfig{Network: net})
	c := &qmiCapture{}
	fn.startWith(c.send, func(rule, detail string) { t.Errorf("violation %s: %s", rule, detail) }, 0, false)
	defer fn.Stop()

	want := newDriftWalk(42)
	var walked []float64
	for len(walked) < 30 {
		walked = append(walked, want.next(d))
	}
	seen, moved := 0, false
	for deadline := time.Now().Add(10 * time.Second); seen < 10; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d drift steps seen in 10 s, want 10", seen)
		}
		net.mu.Lock()
		cell := net.cellLocked()
		steps := 0
		if w := net.st.walk; w != nil {
			steps = w.steps
		}
		net.mu.Unlock()
		if steps == 0 || steps > len(walked) {
			continue
		}
		seen++
		off := cell.LTE.RSRP - base.RSRP
		if math.Abs(off-walked[steps-1]) > 1e-9 {
			t.Errorf("step %d: RSRP offset %.1f, the seed's walk says %.1f", steps, off, walked[steps-1])
		}
		if off < -5 || off > 5 {
			t.Errorf("RSRP %.1f dBm is %.1f dB from %.0f, range 5", cell.LTE.RSRP, off, base.RSRP)
		}
		if math.Abs(cell.LTE.SINR-base.SINR-off) > 1e-9 || cell.RSSIdBm != -73+2*int(math.Round(off/2)) {
			t.Errorf("SINR %.1f and RSSI %d do not follow RSRP's offset %.1f", cell.LTE.SINR, cell.RSSIdBm, off)
		}
		moved = moved || off != 0
	}
	if !moved {
		t.Error("the signal never moved")
	}
	other := newDriftWalk(43)
	same := true
	for i := range 5 {
		same = same && other.next(d) == walked[i]
	}
	if same {
		t.Error("seeds 42 and 43 walk alike")
	}
}

// TestScheduleStepsThroughItsMeasurementsAndRepeats: a registered modem
// plays the schedule's steps in order — signal, RATs and carriers, as
// QMI's serving system and the cell read them — and starts over after
// Period.
func TestScheduleStepsThroughItsMeasurementsAndRepeats(t *testing.T) {
	lteOnly := Step{At: 0, LTE: &Measurement{RSRP: -90, RSRQ: -8, SINR: 15}}
	endc := Step{At: 20 * time.Millisecond, LTE: &Measurement{RSRP: -110, RSRQ: -14, SINR: 2},
		NR:         &Measurement{RSRP: -100, RSRQ: -12, SINR: 5},
		Components: []Component{{Band: 20, Channel: 6300, PCI: 7, BandwidthMHz: 10}, {NR: true, Band: 78, Channel: 636666, PCI: 8, BandwidthMHz: 100}}}
	// Given out of order: played in time order.
	// The configured cell's RSRP is the first step's: RSSI moves by the
	// EN-DC step's −20 dB only.
	net := NewNetwork(NetworkConfig{Cell: Cell{LTE: &Measurement{RSRP: -90, RSRQ: -9, SINR: 13}, Components: DefaultCell().Components,
		Schedule: Schedule{Steps: []Step{endc, lteOnly}, Period: 40 * time.Millisecond}}})
	fn := NewQMIFunction(QMIConfig{Network: net})
	c := &qmiCapture{}
	fn.startWith(c.send, func(rule, detail string) { t.Errorf("violation %s: %s", rule, detail) }, 0, false)
	defer fn.Stop()

	// Watch for LTE-only, then EN-DC, then LTE-only again (a repeat).
	var seen []string
	for deadline := time.Now().Add(20 * time.Second); len(seen) < 3; time.Sleep(200 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("saw %v in 20 s, want lte, endc, lte", seen)
		}
		net.mu.Lock()
		cell := net.cellLocked()
		ss := fn.servingSystemLocked()
		rssi := net.st.signal.RSSI
		net.mu.Unlock()
		var now string
		switch {
		case cell.LTE != nil && cell.LTE.RSRP == -90 && cell.NR == nil:
			now = "lte"
			if len(ss.RadioInterfaces) != 1 || cell.Components[0].Band != 3 || rssi != baseRSSI {
				t.Fatalf("LTE step: serving system %v, carriers %+v, RSSI %d", ss.RadioInterfaces, cell.Components, rssi)
			}
		case cell.LTE != nil && cell.LTE.RSRP == -110 && cell.NR != nil && cell.NR.SINR == 5:
			now = "endc"
			if len(ss.RadioInterfaces) != 2 || len(cell.Components) != 2 || cell.Components[0].Band != 20 || rssi != baseRSSI-10 {
				t.Fatalf("EN-DC step: serving system %v, carriers %+v, RSSI %d (want %d)", ss.RadioInterfaces, cell.Components, rssi, baseRSSI-10)
			}
		default:
			continue // before registration, or the configured cell before step 0
		}
		if len(seen) == 0 || seen[len(seen)-1] != now {
			seen = append(seen, now)
		}
	}
	if seen[0] != "lte" || seen[1] != "endc" || seen[2] != "lte" {
		t.Errorf("steps seen %v, want lte, endc, lte", seen)
	}
}
