package radio

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// vlink is a Link's two lines driven in virtual time, as Link drives
// them in real time (same admit, same send, same due).
type vlink struct {
	sh   shared
	dirs [2]line
	out  []packet
}

func newVirtual(t *testing.T, c Config) *vlink {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	v := &vlink{sh: shared{ho: c.Handover, rrc: c.RRC, seed: c.Seed}}
	v.dirs[Down].init(c.Down, &v.sh, splitmix(c.Seed))
	v.dirs[Up].init(c.Up, &v.sh, splitmix(c.Seed+1))
	return v
}

func (v *vlink) send(d Dir, now time.Duration, tag uint32, n int) {
	ready := now
	if v.sh.rrc.Idle > 0 {
		ready = v.sh.admit(now)
	}
	v.dirs[d].send(now, ready, tag, make([]byte, n))
}

// delivery is what a probe at the far end records.
type delivery struct {
	tag      uint32
	size     int
	sent, at time.Duration
}

// collect delivers d's due packets at now.
func (v *vlink) collect(d Dir, now time.Duration, got *[]delivery) {
	l := &v.dirs[d]
	l.advance(now)
	v.out = l.due(now, v.out[:0])
	for _, p := range v.out {
		*got = append(*got, delivery{p.tag, len(p.buf), p.arrive, p.at})
		l.recycle(p.buf)
	}
}

// probe sends size-byte packets on d every gap from 0 to dur, collecting
// at every step and for a further 10 s, and returns what arrived.
func (v *vlink) probe(d Dir, size int, gap, dur time.Duration) []delivery {
	var got []delivery
	var tag uint32
	for now := time.Duration(0); now < dur; now += gap {
		v.send(d, now, tag, size)
		tag++
		v.collect(d, now, &got)
	}
	for now := dur; now < dur+10*time.Second; now += time.Millisecond {
		v.collect(d, now, &got)
	}
	return got
}

// rateIn is the delivered rate (bit/s) in [from, to).
func rateIn(got []delivery, from, to time.Duration) float64 {
	bytes := 0
	for _, g := range got {
		if g.at >= from && g.at < to {
			bytes += g.size
		}
	}
	return float64(bytes) * 8 / (to - from).Seconds()
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*want {
		t.Errorf("%s = %.4g, want %.4g ±%.0f%%", what, got, want, tol*100)
	}
}

func TestSaturatedBottleneckDeliversItsRateAndBoundsItsQueue(t *testing.T) {
	const rate, delay, limit = 10e6, 20 * time.Millisecond, 100
	v := newVirtual(t, Config{Down: Direction{Rate: rate, Delay: delay, Queue: Queue{Packets: limit}}})
	// 1250-byte packets every 500 µs: 20 Mbit/s, twice the rate.
	got := v.probe(Down, 1250, 500*time.Microsecond, 10*time.Second)
	within(t, "delivered rate", rateIn(got, time.Second, 10*time.Second), rate, 0.10)
	st := v.dirs[Down].stats()
	if st.MaxQueued > limit {
		t.Errorf("queue held %d packets, limit %d", st.MaxQueued, limit)
	}
	if st.DroppedQueue == 0 || st.DroppedQueue+st.Delivered != st.Enqueued {
		t.Errorf("stats %+v: want queue drops and every packet delivered or dropped", st)
	}
	// 1 ms to cross; a full queue adds 100 ms.
	minDelay := delay + time.Millisecond
	for _, g := range got {
		if d := g.at - g.sent; d < minDelay {
			t.Fatalf("packet %d took %v, less than the delay plus its crossing, %v", g.tag, d, minDelay)
		}
	}
	if st.MaxQueueDelay > limit*time.Millisecond {
		t.Errorf("a packet waited %v in a queue that drains in %v", st.MaxQueueDelay, limit*time.Millisecond)
	}
}

func TestQueueByteLimitIsNeverExceeded(t *testing.T) {
	v := newVirtual(t, Config{Up: Direction{Rate: 1e6, Queue: Queue{Bytes: 10000}}})
	var got []delivery
	for i := range 2000 {
		now := time.Duration(i) * 100 * time.Microsecond
		v.send(Up, now, uint32(i), 100+i%1400)
		v.collect(Up, now, &got)
	}
	if st := v.dirs[Up].stats(); st.MaxQueuedBytes > 10000 || st.DroppedQueue == 0 {
		t.Errorf("max queued %d bytes (limit 10000), %d dropped", st.MaxQueuedBytes, st.DroppedQueue)
	}
}

func TestUnloadedLineDelaysEachPacketByDelayAndCrossing(t *testing.T) {
	v := newVirtual(t, Config{Down: Direction{Rate: 8e6, Delay: 30 * time.Millisecond, Queue: Queue{Packets: 10}}})
	got := v.probe(Down, 1000, 10*time.Millisecond, time.Second)
	if len(got) != 100 {
		t.Fatalf("%d of 100 delivered", len(got))
	}
	for _, g := range got {
		// 1000 bytes at 8 Mbit/s: 1 ms.
		if d := g.at - g.sent; d != 31*time.Millisecond {
			t.Fatalf("packet %d took %v, want 31ms", g.tag, d)
		}
	}
}

// binomialOK reports whether k of n is within 4.5 σ of n·p.
func binomialOK(k, n int, p float64) bool {
	mean, sd := float64(n)*p, math.Sqrt(float64(n)*p*(1-p))
	return math.Abs(float64(k)-mean) <= 4.5*sd
}

func TestRandomLossFractionWithinBinomialBounds(t *testing.T) {
	for _, p := range []float64{0.0001, 0.0025, 0.01, 0.2} {
		v := newVirtual(t, Config{Seed: 42, Down: Direction{Loss: p}})
		const n = 200000
		got := v.probe(Down, 100, time.Microsecond, n*time.Microsecond)
		st := v.dirs[Down].stats()
		if lost := n - len(got); !binomialOK(lost, n, p) || int(st.DroppedLoss) != lost {
			t.Errorf("loss %v: lost %d of %d (counted %d), want %.0f ± 4.5σ", p, lost, n, st.DroppedLoss, n*p)
		}
	}
}

func TestGilbertElliottLossRateAndBurstLength(t *testing.T) {
	g := GilbertElliott{P: 0.01, R: 0.25, LossBad: 1}
	v := newVirtual(t, Config{Seed: 7, Down: Direction{Burst: g}})
	const n = 400000
	got := v.probe(Down, 100, time.Microsecond, n*time.Microsecond)
	delivered := make([]bool, n)
	for _, d := range got {
		delivered[d.tag] = true
	}
	lost, bursts := 0, 0
	for i, ok := range delivered {
		if !ok {
			lost++
			if i == 0 || delivered[i-1] {
				bursts++
			}
		}
	}
	within(t, "loss fraction", float64(lost)/n, g.Rate(), 0.10)
	within(t, "mean burst", float64(lost)/float64(bursts), 1/g.R, 0.10)
}

func TestSameSeedSameFate(t *testing.T) {
	c := Config{Seed: 3, Down: Direction{Loss: 0.1, Jitter: 5 * time.Millisecond, Reorder: 0.05}}
	run := func() []delivery {
		return newVirtual(t, c).probe(Down, 100, 100*time.Microsecond, time.Second)
	}
	a, b := run(), run()
	if !slices.Equal(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	c.Seed = 4
	if slices.Equal(a, newVirtual(t, c).probe(Down, 100, 100*time.Microsecond, time.Second)) {
		t.Fatal("another seed gives the same run")
	}
}

func TestJitterDelaysWithinRangeWithoutReordering(t *testing.T) {
	const delay, jitter = 10 * time.Millisecond, 4 * time.Millisecond
	v := newVirtual(t, Config{Seed: 1, Down: Direction{Delay: delay, Jitter: jitter}})
	got := v.probe(Down, 100, 5*time.Millisecond, 10*time.Second)
	var ds []time.Duration
	for i, g := range got {
		if i > 0 && g.tag < got[i-1].tag {
			t.Fatalf("packet %d delivered after %d", got[i-1].tag, g.tag)
		}
		d := g.at - g.sent
		if d < delay || d >= delay+jitter {
			t.Fatalf("packet %d took %v, want [%v, %v)", g.tag, d, delay, delay+jitter)
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	// Packets 5 ms apart never catch up with a 4 ms jitter: the
	// median is the uniform draw's, delay + jitter/2.
	within(t, "median delay", float64(ds[len(ds)/2]), float64(delay+jitter/2), 0.05)
}

func TestReorderedPacketsOvertake(t *testing.T) {
	const p = 0.05
	v := newVirtual(t, Config{Seed: 9, Down: Direction{Delay: 20 * time.Millisecond, Reorder: p}})
	const n = 20000
	got := v.probe(Down, 100, time.Millisecond, n*time.Millisecond)
	early := 0
	for i, g := range got {
		if i+1 < len(got) && got[i+1].tag < g.tag {
			continue
		}
		if g.at == g.sent {
			early++
		}
	}
	st := v.dirs[Down].stats()
	if !binomialOK(int(st.Reordered), n, p) || early == 0 {
		t.Errorf("%d of %d reordered (%d overtook), want %.0f ± 4.5σ", st.Reordered, n, early, n*p)
	}
	if slices.IsSortedFunc(got, func(a, b delivery) int { return int(a.tag) - int(b.tag) }) {
		t.Error("delivered in order")
	}
}

func TestCoDelHoldsQueueDelayNearTargetWhereDropTailDoesNot(t *testing.T) {
	late := func(c Config) (time.Duration, Stats) {
		v := newVirtual(t, c)
		// 10 % above the rate, unresponsive: CoDel's drop rate grows
		// with √count, so it catches up with this excess in a few
		// seconds (it is made for senders that back off).
		got := v.probe(Down, 1250, 909*time.Microsecond, 20*time.Second)
		var ds []time.Duration
		for _, g := range got {
			if g.sent > 10*time.Second {
				ds = append(ds, g.at-g.sent)
			}
		}
		slices.Sort(ds)
		return ds[len(ds)/2], v.dirs[Down].stats()
	}
	q := Queue{Packets: 1000}
	tail, _ := late(Config{Down: Direction{Rate: 10e6, Queue: q}})
	q.CoDel = true
	cd, st := late(Config{Down: Direction{Rate: 10e6, Queue: q}})
	// Drop-tail: a full 1000-packet queue at 1 ms each, ~1 s. CoDel
	// keeps the standing queue around its 5 ms target.
	if tail < 900*time.Millisecond {
		t.Errorf("drop-tail median delay %v, want a full queue's ~1s", tail)
	}
	if cd > 30*time.Millisecond || st.DroppedAQM == 0 || st.DroppedQueue != 0 {
		t.Errorf("CoDel median delay %v (want ≲ target), stats %+v", cd, st)
	}
}

func TestHandoverGapHoldsOrDropsTheQueue(t *testing.T) {
	for _, drop := range []bool{false, true} {
		c := Config{Seed: 5, Down: Direction{Delay: 10 * time.Millisecond},
			Handover: Handover{Every: time.Second, Gap: 100 * time.Millisecond, DropQueue: drop}}
		v := newVirtual(t, c)
		got := v.probe(Down, 100, time.Millisecond, 3500*time.Millisecond)
		st := v.dirs[Down].stats()
		for _, g := range got {
			k := g.sent / time.Second
			inGap := k >= 1 && g.sent%time.Second < 100*time.Millisecond
			if inGap && drop {
				t.Fatalf("drop: packet sent at %v, in a gap, delivered", g.sent)
			}
			if inGap && g.at < k*time.Second+110*time.Millisecond {
				t.Fatalf("hold: packet sent at %v delivered at %v, before the gap's end + delay", g.sent, g.at)
			}
		}
		if drop && st.DroppedGap != 300 || !drop && (st.DroppedGap != 0 || len(got) != 3500) {
			t.Errorf("drop %v: %d delivered, stats %+v", drop, len(got), st)
		}
	}
}

func TestHandoverGapLengthsStayInRange(t *testing.T) {
	sh := shared{ho: Handover{Every: time.Second, Gap: 34 * time.Millisecond, GapMax: 52 * time.Millisecond}, seed: 11}
	seen := map[time.Duration]bool{}
	for k := time.Duration(1); k < 100; k++ {
		end, in := sh.gap(k * time.Second)
		if !in || end-k*time.Second < 34*time.Millisecond || end-k*time.Second > 52*time.Millisecond {
			t.Fatalf("gap %d: in %v, length %v", k, in, end-k*time.Second)
		}
		seen[end-k*time.Second] = true
		if _, in := sh.gap(k*time.Second - 1); in {
			t.Fatalf("in a gap just before gap %d", k)
		}
	}
	if len(seen) < 50 {
		t.Errorf("only %d different gap lengths in 99", len(seen))
	}
}

func TestRRCPromotionDelaysFirstPacketAfterIdleBothWays(t *testing.T) {
	const idle, promo, delay = time.Second, 500 * time.Millisecond, 10 * time.Millisecond
	v := newVirtual(t, Config{Down: Direction{Delay: delay}, Up: Direction{Delay: delay}, RRC: RRC{Idle: idle, Promotion: promo}})
	var down, up []delivery
	v.send(Up, 0, 0, 100)                    // connected at the start
	v.send(Up, 500*time.Millisecond, 1, 100) // busy: no promotion
	v.send(Up, 3*time.Second, 2, 100)        // 2.5 s idle: promotes
	v.send(Down, 3100*time.Millisecond, 3, 100)
	for now := time.Duration(0); now < 5*time.Second; now += time.Millisecond {
		v.collect(Up, now, &up)
		v.collect(Down, now, &down)
	}
	want := []time.Duration{delay, 500*time.Millisecond + delay, 3*time.Second + promo + delay}
	if len(up) != 3 || len(down) != 1 {
		t.Fatalf("delivered %d up, %d down", len(up), len(down))
	}
	for i, g := range up {
		if g.at != want[i] {
			t.Errorf("up packet %d delivered at %v, want %v", i, g.at, want[i])
		}
	}
	if down[0].at != 3*time.Second+promo+delay {
		t.Errorf("down packet during the promotion delivered at %v, want %v", down[0].at, 3*time.Second+promo+delay)
	}
	if v.sh.promotions != 1 {
		t.Errorf("%d promotions, want 1", v.sh.promotions)
	}
}

func TestRateFollowsTrace(t *testing.T) {
	tr, err := ParseTrace([]byte("time_ms,rate_kbps\n0,10000\n1000,2000\n2000,0\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := newVirtual(t, Config{Down: Direction{Trace: tr, Queue: Queue{Packets: 50}}})
	// 1000-byte packets every 400 µs: 20 Mbit/s, above both rates.
	got := v.probe(Down, 1000, 400*time.Microsecond, 6*time.Second)
	for _, w := range []struct {
		from time.Duration
		rate float64
	}{{200 * time.Millisecond, 10e6}, {1200 * time.Millisecond, 2e6}, {2200 * time.Millisecond, 10e6}, {5200 * time.Millisecond, 2e6}} {
		within(t, "rate from "+w.from.String(), rateIn(got, w.from, w.from+800*time.Millisecond), w.rate, 0.10)
	}
}

func TestSteadyStateDoesNotAllocate(t *testing.T) {
	c, _ := Preset("lte")
	v := newVirtual(t, c)
	pkt := make([]byte, 1400)
	now := time.Duration(0)
	step := func() {
		now += 400 * time.Microsecond
		l := &v.dirs[Down]
		l.send(now, now, 0, pkt)
		l.advance(now)
		v.out = l.due(now, v.out[:0])
		for _, p := range v.out {
			l.recycle(p.buf)
		}
	}
	for range 20000 {
		step()
	}
	if a := testing.AllocsPerRun(10000, step); a != 0 {
		t.Errorf("%v allocations per packet", a)
	}
}

func TestPresetsAreValidAndOneFillsEightMegabytes(t *testing.T) {
	big := false
	for _, p := range Presets() {
		c, err := Preset(p.Name)
		if err != nil || c.Validate() != nil || c.Name != p.Name || len(p.Sources) == 0 {
			t.Errorf("preset %s: %v %+v", p.Name, err, c)
		}
		if c.Down.BDP(2*c.Down.Delay) >= 8<<20 {
			big = true
		}
	}
	if !big {
		t.Error("no preset has a DL BDP of 8 MiB or more")
	}
	if _, err := Preset("nope"); err == nil {
		t.Error("unknown preset accepted")
	}
}

// TestScaledPresetKeepsTheBandwidthDelayProduct: nr-mmwave-far-scaled is
// nr-mmwave-far with rates a tenth and the path's durations ten times:
// the same BDP and queues in bytes, the gaps as long in round trips.
func TestScaledPresetKeepsTheBandwidthDelayProduct(t *testing.T) {
	f, err := Preset("nr-mmwave-far")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Preset("nr-mmwave-far-scaled")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name string
		f, s Direction
	}{{"down", f.Down, s.Down}, {"up", f.Up, s.Up}} {
		if d.s.Rate*10 != d.f.Rate || d.s.Delay != 10*d.f.Delay || d.s.Queue != d.f.Queue {
			t.Errorf("%s: scaled %+v, unscaled %+v", d.name, d.s, d.f)
		}
		if got, want := d.s.BDP(2*d.s.Delay), d.f.BDP(2*d.f.Delay); got != want {
			t.Errorf("%s: BDP %d, unscaled %d", d.name, got, want)
		}
	}
	if s.Down.BDP(2*s.Down.Delay) < 8<<20 {
		t.Errorf("scaled DL BDP %d below 8 MiB", s.Down.BDP(2*s.Down.Delay))
	}
	h := f.Handover
	if want := (Handover{Every: 10 * h.Every, Gap: 10 * h.Gap, GapMax: 10 * h.GapMax, DropQueue: h.DropQueue}); s.Handover != want {
		t.Errorf("handover %+v, want %+v", s.Handover, want)
	}
	if s.RRC != f.RRC {
		t.Errorf("RRC %+v, want nr-mmwave-far's %+v", s.RRC, f.RRC)
	}
}

// BenchmarkLine is one packet through a saturated lte DL in virtual time:
// send, cross, deliver, recycle.
func BenchmarkLine(b *testing.B) {
	c, _ := Preset("lte")
	var sh shared
	var l line
	l.init(c.Down, &sh, 1)
	pkt := make([]byte, 1400)
	var out []packet
	now := time.Duration(0)
	b.ReportAllocs()
	for b.Loop() {
		now += 300 * time.Microsecond
		l.send(now, now, 0, pkt)
		out = l.due(now, out[:0])
		for _, p := range out {
			l.recycle(p.buf)
		}
	}
}

// TestLargestPresetBDPIsTheMmWaveFarPath: the 10 MB of nr-mmwave-far
// (1686 Mbit/s × 48 ms; its scaled form keeps the product).
func TestLargestPresetBDPIsTheMmWaveFarPath(t *testing.T) {
	name, bdp := LargestPresetBDP()
	if !strings.HasPrefix(name, "nr-mmwave-far") || bdp < 9_000_000 || bdp > 11_000_000 {
		t.Fatalf("LargestPresetBDP = %s, %d bytes; want nr-mmwave-far's ~10 MB", name, bdp)
	}
}

// TestLTETraceHasTheMeasuredSpread: lte-trace's per-second rates have
// the 4G spread of the Lumos5G data (p10/p50/p90 5/30/94 Mbit/s, nearest
// rank), up is a fifth of down, and a packet probe through the model
// meets the trace's rate second by second.
func TestLTETraceHasTheMeasuredSpread(t *testing.T) {
	v := slices.Clone(lteTraceMbps[:])
	slices.Sort(v)
	rank := func(p float64) float64 { return v[int(math.Ceil(p*float64(len(v))))-1] }
	if p10, p50, p90 := rank(0.1), rank(0.5), rank(0.9); p10 != 5 || p50 != 30 || p90 != 94 {
		t.Errorf("p10/p50/p90 = %v/%v/%v Mbit/s, want 5/30/94", p10, p50, p90)
	}
	c, err := Preset("lte-trace")
	if err != nil {
		t.Fatal(err)
	}
	if c.Down.Trace.Period() != time.Minute || c.Down.Rate != 0 {
		t.Fatalf("down: period %v, rate %d", c.Down.Trace.Period(), c.Down.Rate)
	}
	for s := range 60 {
		at := time.Duration(s)*time.Second + time.Second/2
		if d, u := c.Down.Trace.RateAt(at), c.Up.Trace.RateAt(at); d != int64(lteTraceMbps[s]*1e6) || u != int64(lteTraceMbps[s]*0.2*1e6) {
			t.Fatalf("second %d: down %d, up %d bit/s", s, d, u)
		}
	}
	if got := c.Down.MeanRate(); got != c.Down.Trace.MeanRate() || got < 36e6 || got > 37e6 {
		t.Errorf("mean down rate %d", got)
	}
	// The first 6 s, as the bench's streams see them: 1000-byte packets
	// every 50 µs (160 Mbit/s, above every rate there), no loss.
	c.Down.Loss = 0
	c.Down.Queue = Queue{Packets: 100}
	v2 := newVirtual(t, Config{Down: c.Down})
	got := v2.probe(Down, 1000, 50*time.Microsecond, 6*time.Second)
	for s := range 6 {
		from := time.Duration(s)*time.Second + 100*time.Millisecond
		within(t, fmt.Sprintf("second %d", s), rateIn(got, from, from+800*time.Millisecond), lteTraceMbps[s]*1e6, 0.10)
	}
}
