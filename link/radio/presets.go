package radio

import (
	"fmt"
	"slices"
	"time"
)

// PresetInfo describes a named preset.
type PresetInfo struct {
	Name, Summary string
	// Sources are the public measurements its numbers come from
	// (docs/RADIO.md gives each number's).
	Sources []string
}

const (
	srcS21 = "Narayanan et al., \"A Variegated Look at 5G in the Wild\", SIGCOMM 2021 (artifact SIGCOMM21-5G/artifact)"
	srcS22 = "Hassan et al., \"Vivisecting Mobility Management in 5G Cellular Networks\", SIGCOMM 2022 (artifact SIGCOMM22-5GMobility/artifact)"
	srcPAN = "Yan et al., \"Pantheon: the training ground for Internet congestion-control research\", USENIX ATC 2018 (StanfordSNR/pantheon, calibrated emulators)"
	srcMM  = "Netravali et al., \"Mahimahi: Accurate Record-and-Replay for HTTP\", USENIX ATC 2015 (ravinet/mahimahi traces/)"
	srcHua = "Huang et al., \"A Close Examination of Performance and Power Characteristics of 4G LTE Networks\", MobiSys 2012"
	srcCoD = "RFC 8289, Controlled Delay Active Queue Management"
)

type preset struct {
	info PresetInfo
	cfg  func() Config
}

const ms = time.Millisecond

// mbps is n Mbit/s in bit/s.
func mbps(n float64) int64 { return int64(n * 1e6) }

// drainQueue is a drop-tail queue holding d of drain at rate.
func drainQueue(rate int64, d time.Duration) Queue {
	return Queue{Bytes: int(float64(rate) * d.Seconds() / 8)}
}

// lteConfig is the lte preset: the others start from it.
func lteConfig() Config {
	down, up := mbps(30), mbps(6)
	return Config{
		Name: "lte",
		// 30 Mbit/s: Lumos5G 4G per-second throughput median (S21's
		// Lumous5G traces); 6 Mbit/s: Huang'12's LTE uplink median.
		// One-way 11 ms each way: S21's LTE RTT to a near server,
		// 22 ms. Queue: 1 s of drain (Pantheon's calibrated cellular
		// drop-tail depths hold 0.6–1.7 s). Loss: Pantheon's
		// calibrated cellular paths, 0.25 % up, 0.01 % down. RRC: S21's
		// RRC probe, ~10 s inactivity timer, +760 ms when idle.
		Down: Direction{Rate: down, Delay: 11 * ms, Queue: drainQueue(down, time.Second), Loss: 0.0001},
		Up:   Direction{Rate: up, Delay: 11 * ms, Queue: drainQueue(up, time.Second), Loss: 0.0025},
		RRC:  RRC{Idle: 10 * time.Second, Promotion: 760 * ms},
	}
}

var presets = []preset{
	{PresetInfo{"lte", "LTE near a server: 30/6 Mbit/s, RTT 22 ms, 1 s drop-tail queues, 0.01 %/0.25 % loss, RRC idle after 10 s (+760 ms)",
		[]string{srcS21, srcHua, srcPAN}}, lteConfig},
	{PresetInfo{"nr-sa", "5G SA low-band: 40/40 Mbit/s, RTT 60 ms, 1 s queues, a 66 ms handover every 46 s (queue held), RRC +745 ms",
		[]string{srcS21, srcS22, srcPAN}}, func() Config {
		c := lteConfig()
		c.Name = "nr-sa"
		r := mbps(40)
		for _, d := range []*Direction{&c.Down, &c.Up} {
			d.Rate, d.Delay, d.Queue = r, 30*ms, drainQueue(r, time.Second)
		}
		// S22: SA handover execution p50 66 ms; S21: 1.3 SA handovers a
		// minute while driving.
		c.Handover = Handover{Every: 46 * time.Second, Gap: 66 * ms}
		c.RRC.Promotion = 745 * ms
		return c
	}},
	{PresetInfo{"nr-mmwave", "5G NSA mmWave near a server: 429/75 Mbit/s, RTT 7 ms, 0.25 s queues, a 61–113 ms blockage every 10 s (queue dropped), RRC +870 ms",
		[]string{srcS21, srcS22}}, func() Config {
		c := mmwave(429, 7*ms, 250*ms)
		c.Name = "nr-mmwave"
		return c
	}},
	{PresetInfo{"nr-mmwave-far", "5G mmWave to a distant server: 1686/75 Mbit/s, RTT 48 ms (DL BDP 10 MB), one-BDP queues, blockage as nr-mmwave",
		[]string{srcS21, srcS22}}, func() Config {
		c := mmwave(1686, 48*ms, 48*ms)
		c.Name = "nr-mmwave-far"
		return c
	}},
	{PresetInfo{"nr-mmwave-far-scaled", "nr-mmwave-far slowed tenfold for a machine that cannot carry 1686 Mbit/s: 168.6/7.5 Mbit/s, RTT 480 ms (DL BDP 10 MB, as measured), one-BDP queues, a 0.61–1.13 s blockage every 100 s",
		[]string{srcS21, srcS22}}, func() Config {
		// nr-mmwave-far with every rate divided by scaleDown and every
		// duration of the path (delay, queue drain, handover interval
		// and gaps) multiplied by it: the same bandwidth-delay product
		// and queues in bytes, the same gaps in round trips, so TCP's
		// windows and what it loses are those of nr-mmwave-far while
		// the packets per second are a tenth (docs/RADIO.md). RRC is
		// not scaled: it wakes a radio, not a path.
		const scaleDown = 10
		c := mmwave(1686.0/scaleDown, 48*ms*scaleDown, 48*ms*scaleDown)
		c.Name = "nr-mmwave-far-scaled"
		c.Up.Rate /= scaleDown
		c.Up.Queue = drainQueue(c.Up.Rate, 48*ms*scaleDown)
		c.Handover.Every *= scaleDown
		c.Handover.Gap *= scaleDown
		c.Handover.GapMax *= scaleDown
		return c
	}},
	{PresetInfo{"congested-cell", "a loaded LTE cell far away: 4.6/1.9 Mbit/s, RTT 160 ms, 426-packet drop-tail queues, 0.01 %/0.26 % loss, RRC idle after 5 s (+815 ms)",
		[]string{srcMM, srcPAN, srcS21}}, func() Config {
		// Rates: mean of Mahimahi's ATT-LTE-driving-2016 traces
		// (down/up). Delay: Pantheon's calibrated Colombia path
		// (mm-delay 80 each way) and its 426-packet queue; loss:
		// Pantheon's Brazil→Colombia path. RRC: S21, T-Mobile LTE,
		// ~5 s timer, +815 ms.
		c := Config{Name: "congested-cell",
			Down: Direction{Rate: mbps(4.6), Delay: 80 * ms, Queue: Queue{Packets: 426}, Loss: 0.0001},
			Up:   Direction{Rate: mbps(1.9), Delay: 80 * ms, Queue: Queue{Packets: 426}, Loss: 0.0026},
			RRC:  RRC{Idle: 5 * time.Second, Promotion: 815 * ms},
		}
		return c
	}},
	{PresetInfo{"lte-trace", "lte whose rate follows a 60 s trace (one rate per second) with the per-second spread measured on 4G: 5/30/94 Mbit/s p10/p50/p90 down, a fifth of that up; 1 s queues at the median rate",
		[]string{srcS21, srcHua, srcPAN}}, func() Config {
		c := lteConfig()
		c.Name = "lte-trace"
		c.Down.Rate, c.Down.Trace = 0, perSecondTrace(lteTraceMbps[:], 1)
		c.Up.Rate, c.Up.Trace = 0, perSecondTrace(lteTraceMbps[:], 0.2)
		return c
	}},
	{PresetInfo{"handover-train", "lte with a 34–52 ms handover every 6 s (queue held), as NSA's 4G↔5G switching while driving",
		[]string{srcS21, srcS22}}, func() Config {
		c := lteConfig()
		c.Name = "handover-train"
		// S22: LTE PCell handover execution p50 34 ms, NSA PCell p50
		// 52 ms; S21: 10.1 NSA handovers a minute while driving.
		c.Handover = Handover{Every: 6 * time.Second, Gap: 34 * ms, GapMax: 52 * ms}
		return c
	}},
}

// mmwave is the mmWave presets' shape: S21's NSA mmWave rates (DL down
// Mbit/s, UL 75), a queue of q at the DL rate, blockage gaps from S22's NSA
// mmWave PCell handovers (p50 61 ms, p99 113 ms) every 10 s (design) that
// drop the queue, and no random loss: HARQ and RLC repair the air's
// losses, and a random loss that did not would cap one TCP stream far
// below these rates (with a Gilbert–Elliott loss of 0.4 % in bursts of 2,
// hack/bench -only radio measured 22 Mbit/s here, as Mathis et al.'s
// formula predicts for 7 ms).
// lteTraceMbps is lte-trace's downlink rate in Mbit/s, one value per
// second for a minute, then again. The values are ours; their
// distribution is the one computed from the Lumos5G 4G per-second
// throughput in the SIGCOMM 2021 artifact (p10/p50/p90 5/30/94 Mbit/s,
// nearest rank; TestLTETraceHasTheMeasuredSpread). Their order is a
// drive's: the rate falls from 48 to 3 Mbit/s within the first 6 s
// (what one bench stream of table 10 sees), rises to 110 at 10 s, and
// falls to 2.5 at 20 s.
var lteTraceMbps = [...]float64{
	28, 35, 48, 22, 4, 3, 9, 31, 66, 94,
	110, 98, 40, 33, 27, 30, 25, 19, 14, 5,
	2.5, 4, 12, 26, 38, 52, 47, 36, 30, 29,
	33, 41, 58, 105, 120, 96, 100, 44, 31, 24,
	17, 11, 7, 4.5, 15, 28, 34, 30, 26, 32,
	39, 45, 37, 29, 21, 18, 23, 30, 36, 31,
}

// perSecondTrace is a trace holding mbps[i]·scale Mbit/s during second i.
func perSecondTrace(mbps []float64, scale float64) *Trace {
	t := new(Trace)
	for i, r := range mbps {
		t.add(time.Duration(i+1)*time.Second, r*scale*1e6)
	}
	return t
}

func mmwave(down float64, rtt, q time.Duration) Config {
	d, u := mbps(down), mbps(75)
	return Config{
		Down:     Direction{Rate: d, Delay: rtt / 2, Queue: drainQueue(d, q)},
		Up:       Direction{Rate: u, Delay: rtt / 2, Queue: drainQueue(u, q)},
		Handover: Handover{Every: 10 * time.Second, Gap: 61 * ms, GapMax: 113 * ms, DropQueue: true},
		RRC:      RRC{Idle: 10 * time.Second, Promotion: 870 * ms},
	}
}

// Presets lists the named presets.
func Presets() []PresetInfo {
	out := make([]PresetInfo, len(presets))
	for i, p := range presets {
		out[i] = p.info
	}
	return out
}

// Preset returns the named preset's configuration.
func Preset(name string) (Config, error) {
	i := slices.IndexFunc(presets, func(p preset) bool { return p.info.Name == name })
	if i < 0 {
		return Config{}, fmt.Errorf("radio: no preset %q (presets: %s)", name, presetNames())
	}
	return presets[i].cfg(), nil
}

func presetNames() string {
	s := ""
	for i, p := range presets {
		if i > 0 {
			s += ", "
		}
		s += p.info.Name
	}
	return s
}

// LargestPresetBDP returns the preset, and its bandwidth-delay product in
// bytes, whose rate times round trip is the largest in either direction:
// what one TCP connection's buffers must cover to fill every preset (a
// send buffer of at least it; in gVisor, which advertises half its free
// receive space, a receive buffer of twice it).
func LargestPresetBDP() (name string, bdp int64) {
	for _, p := range Presets() {
		c, err := Preset(p.Name)
		if err != nil {
			continue // Presets names only presets Preset knows
		}
		rtt := c.Down.Delay + c.Up.Delay
		for _, d := range []*Direction{&c.Down, &c.Up} {
			if b := d.BDP(rtt); b > bdp {
				name, bdp = p.Name, b
			}
		}
	}
	return name, bdp
}
