package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// sample is one run's metrics by name.
type sample map[string]float64

// String lists the metrics sorted by name (the -v progress lines).
func (s sample) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(s)) {
		fmt.Fprintf(&b, " %s=%.4g", k, s[k])
	}
	return b.String()
}

// series collects the runs of one configuration.
type series []sample

func (s series) values(k string) []float64 {
	v := make([]float64, 0, len(s))
	for _, x := range s {
		if f, ok := x[k]; ok && !math.IsNaN(f) {
			v = append(v, f)
		}
	}
	return v
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func meanSD(v []float64) (mean, sd float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) < 2 {
		return mean, 0
	}
	for _, x := range v {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(v)-1))
}

// scaled returns the runs of k alone, multiplied by f.
func (s series) scaled(k string, f float64) series {
	out := make(series, 0, len(s))
	for _, v := range s.values(k) {
		out = append(out, sample{k: v * f})
	}
	return out
}

func (s series) med(k string) float64 { return median(s.values(k)) }

// medRange formats the median and the range of the runs: "74.1 (70.2–75.0)".
func (s series) medRange(k string, prec int) string {
	v := s.values(k)
	if len(v) == 0 {
		return "—"
	}
	m := median(v)
	if len(v) == 1 {
		return num(m, prec)
	}
	return fmt.Sprintf("%s (%s–%s)", num(m, prec), num(slices.Min(v), prec), num(slices.Max(v), prec))
}

// meanStd formats "mean ± stdev" of the runs.
func (s series) meanStd(k string, prec int) string {
	v := s.values(k)
	if len(v) == 0 {
		return "—"
	}
	m, sd := meanSD(v)
	return fmt.Sprintf("%s ± %s", num(m, prec), num(sd, prec))
}

// sd is the standard deviation of the runs.
func (s series) sd(k string, prec int) string {
	v := s.values(k)
	if len(v) == 0 {
		return "—"
	}
	_, d := meanSD(v)
	return num(d, prec)
}

func num(f float64, prec int) string {
	if math.IsNaN(f) {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, f)
}

// table is one markdown table of the report with its text and plots.
type table struct {
	id     string // -only name
	title  string
	intro  string // what is measured and what netdev claimed
	header []string
	rows   [][]string
	notes  []string // findings computed from the numbers, targets
	plots  []plot
}

type plot struct {
	file, alt string
	svg       []byte
}

func (t *table) markdown(svgRel string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", t.title)
	if t.intro != "" {
		fmt.Fprintf(&b, "%s\n\n", t.intro)
	}
	b.WriteString("| " + strings.Join(t.header, " | ") + " |\n|")
	for range t.header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	b.WriteString("\n")
	for _, n := range t.notes {
		fmt.Fprintf(&b, "* %s\n", n)
	}
	if len(t.notes) > 0 {
		b.WriteString("\n")
	}
	if svgRel != "" {
		for _, p := range t.plots {
			fmt.Fprintf(&b, "![%s](%s/%s)\n\n", p.alt, svgRel, p.file)
		}
	}
	return b.String()
}
