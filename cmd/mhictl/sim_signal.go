package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
)

// The emulated cell over time (sim serve -signal): a preset or a file of
// steps, one per line,
//
//	TIME,KEY=VALUE[,KEY=VALUE...]
//
// where TIME is a Go duration since the modem registered and the keys are
// -sim-cell's lte=, nr= and bands=; "repeat=DURATION" starts the steps
// over every DURATION, "drift=SEED/INTERVAL" adds a seeded random walk on
// top, "#" starts a comment. The presets are written in the same format.

// signalPreset is a named schedule.
type signalPreset struct {
	name, summary, text string
}

// signalPresets are -signal's names; the first is sim serve's default.
var signalPresets = []signalPreset{
	{"drift", "LTE B3 at RSRP -93 dBm, RSRQ -9 dB, SINR 13 dB, drifting by up to 1 dB every 2 s within ±6 dB (seed 1)",
		"0s,lte=-93/-9/13,bands=B3\ndrift=1/2s\n"},
	{"steady", "LTE B3 at RSRP -93 dBm, RSRQ -9 dB, SINR 13 dB, never changing", "0s,lte=-93/-9/13,bands=B3\n"},
	{"fade", "LTE B3 fading from a good signal to the cell edge and back, 20 s a step, every 2 min", `0s,lte=-85/-7/20,bands=B3
20s,lte=-95/-10/12,bands=B3
40s,lte=-105/-13/5,bands=B3
60s,lte=-115/-17/-3,bands=B3
80s,lte=-105/-13/5,bands=B3
100s,lte=-95/-10/12,bands=B3
repeat=2m
`},
	{"endc", "EN-DC: LTE B3 anchor with NR n78 added, lost for 20 s and added again, every minute", `0s,lte=-95/-10/12,nr=-90/-11/15,bands=B3+n78
30s,lte=-97/-11/10,bands=B3
50s,lte=-95/-10/12,nr=-92/-11/13,bands=B3+n78
repeat=1m
`},
	{"handover", "LTE B3 degrading, then a handover to B20 (another PCI) and a recovery, every 90 s", `0s,lte=-90/-9/15,bands=B3
30s,lte=-108/-15/1,bands=B3
45s,lte=-100/-12/6,bands=B20
60s,lte=-92/-9/13,bands=B20
repeat=90s
`},
}

// maxSignalSteps bounds a schedule file.
const maxSignalSteps = 1000

// loadSignal returns the cell of preset or file name.
func loadSignal(name string) (simnet.Cell, error) {
	for _, p := range signalPresets {
		if p.name == name {
			return parseSignalSchedule(strings.NewReader(p.text))
		}
	}
	f, err := os.Open(name)
	if err != nil {
		var names []string
		for _, p := range signalPresets {
			names = append(names, p.name)
		}
		return simnet.Cell{}, fmt.Errorf("%q is neither a preset (%s) nor a readable file: %w", name, strings.Join(names, ", "), err)
	}
	defer f.Close()
	c, err := parseSignalSchedule(f)
	if err != nil {
		return c, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// parseSignalSchedule parses the schedule format: the first step is also
// the cell's configured state (before registration, and what RSSI moves
// against).
func parseSignalSchedule(r io.Reader) (simnet.Cell, error) {
	var c simnet.Cell
	sc := bufio.NewScanner(r)
	last := time.Duration(-1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && (k == "repeat" || k == "drift") {
			if k == "repeat" {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return c, fmt.Errorf("line %d: repeat=%q: want a positive duration", n, v)
				}
				c.Schedule.Period = d
				continue
			}
			d, err := parseSimCell(line)
			if err != nil {
				return c, fmt.Errorf("line %d: %w", n, err)
			}
			c.Drift = d.Drift
			continue
		}
		at, spec, ok := strings.Cut(line, ",")
		t, err := time.ParseDuration(at)
		if !ok || err != nil || t < 0 {
			return c, fmt.Errorf("line %d: %q: want TIME,KEY=VALUE... (TIME a duration such as 30s)", n, line)
		}
		if t <= last {
			return c, fmt.Errorf("line %d: time %v not after the previous step's %v", n, t, last)
		}
		last = t
		cell, err := parseSimCell(spec)
		if err != nil {
			return c, fmt.Errorf("line %d: %w", n, err)
		}
		if cell.Drift.Interval != 0 || (cell.LTE == nil && cell.NR == nil) {
			return c, fmt.Errorf("line %d: a step sets lte= and/or nr= (and bands=); drift= goes on a line of its own", n)
		}
		if len(c.Schedule.Steps) == maxSignalSteps {
			return c, fmt.Errorf("line %d: more than %d steps", n, maxSignalSteps)
		}
		c.Schedule.Steps = append(c.Schedule.Steps, simnet.Step{At: t, LTE: cell.LTE, NR: cell.NR, Components: cell.Components})
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	if len(c.Schedule.Steps) == 0 {
		return c, fmt.Errorf("no steps (want lines TIME,lte=RSRP/RSRQ/SINR,...)")
	}
	if p := c.Schedule.Period; p != 0 && p <= last {
		return c, fmt.Errorf("repeat=%v is not after the last step (%v)", p, last)
	}
	first := c.Schedule.Steps[0]
	c.LTE, c.NR, c.Components = first.LTE, first.NR, first.Components
	return c, nil
}

// printSignalPresets writes -signal list.
func printSignalPresets(w io.Writer) {
	for _, p := range signalPresets {
		fmt.Fprintf(w, "%s\n  %s\n", p.name, p.summary)
	}
}
