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
