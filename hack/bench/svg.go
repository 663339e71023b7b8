package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
)

// Plots are hand-rolled SVG (standard library only): a grouped bar chart
// and a line chart, each with axes, ticks and a legend.

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"}

const (
	plotW, plotH                       = 720, 360
	marginL, marginR, marginT, marginB = 70, 170, 40, 70
)

// niceMax rounds v up to 1, 2 or 5 × a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func svgHead(b *bytes.Buffer, title, ylabel string, ymax float64) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", plotW, plotH)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", marginL, html.EscapeString(title))
	x0, y0, y1 := marginL, plotH-marginB, marginT
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, y0, plotW-marginR, y0)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, y0, x0, y1)
	for i := 0; i <= 5; i++ {
		v := ymax * float64(i) / 5
		y := float64(y0) - float64(y0-y1)*float64(i)/5
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, plotW-marginR, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, short(v))
	}
	fmt.Fprintf(b, `<text transform="translate(16,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (y0+y1)/2, html.EscapeString(ylabel))
}

func legend(b *bytes.Buffer, names []string) {
	for i, n := range names {
		y := marginT + 10 + 20*i
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", plotW-marginR+12, y, palette[i%len(palette)])
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", plotW-marginR+30, y+10, html.EscapeString(n))
	}
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", math.Round(v/1e5)/10)
	case v >= 1e3:
		return fmt.Sprintf("%gk", math.Round(v/1e2)/10)
	}
	return fmt.Sprintf("%g", math.Round(v*100)/100)
}

// barChart draws groups of bars: vals[s][g] is series s in group g; errs
// (same shape, may be nil) draws a min–max whisker.
func barChart(title, ylabel string, groups, seriesNames []string, vals, lo, hi [][]float64) []byte {
	var b bytes.Buffer
	ymax := 0.0
	for s := range vals {
		for g := range vals[s] {
			ymax = math.Max(ymax, vals[s][g])
			if hi != nil {
				ymax = math.Max(ymax, hi[s][g])
			}
		}
	}
	ymax = niceMax(ymax)
	svgHead(&b, title, ylabel, ymax)
	x0, y0, y1 := float64(marginL), float64(plotH-marginB), float64(marginT)
	gw := float64(plotW-marginR-marginL) / float64(len(groups))
	bw := gw * 0.8 / float64(len(seriesNames))
	scale := func(v float64) float64 { return y0 - (y0-y1)*v/ymax }
	for g, name := range groups {
		gx := x0 + gw*float64(g) + gw*0.1
		for s := range seriesNames {
			v := vals[s][g]
			if math.IsNaN(v) {
				continue
			}
			x := gx + bw*float64(s)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, scale(v), bw-2, y0-scale(v), palette[s%len(palette)])
			if lo != nil && hi != nil && !math.IsNaN(lo[s][g]) {
				cx := x + (bw-2)/2
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", cx, scale(lo[s][g]), cx, scale(hi[s][g]))
			}
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", gx+gw*0.4, y0+18, html.EscapeString(name))
	}
	legend(&b, seriesNames)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// lineChart draws one line per series over the x values xs.
func lineChart(title, xlabel, ylabel string, xs []float64, seriesNames []string, vals [][]float64) []byte {
	var b bytes.Buffer
	ymax := 0.0
	for _, s := range vals {
		for _, v := range s {
			if !math.IsNaN(v) {
				ymax = math.Max(ymax, v)
			}
		}
	}
	ymax = niceMax(ymax)
	svgHead(&b, title, ylabel, ymax)
	x0, y0, y1 := float64(marginL), float64(plotH-marginB), float64(marginT)
	xmax := xs[len(xs)-1]
	sx := func(x float64) float64 { return x0 + float64(plotW-marginR-marginL)*x/xmax }
	sy := func(v float64) float64 { return y0 - (y0-y1)*v/ymax }
	for _, x := range xs {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%g</text>`+"\n", sx(x), y0+16, x)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (x0+float64(plotW-marginR))/2, y0+40, html.EscapeString(xlabel))
	for s := range seriesNames {
		col := palette[s%len(palette)]
		var pts bytes.Buffer
		for i, x := range xs {
			if math.IsNaN(vals[s][i]) {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", sx(x), sy(vals[s][i]))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", sx(x), sy(vals[s][i]), col)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", pts.String(), col)
	}
	legend(&b, seriesNames)
	b.WriteString("</svg>\n")
	return b.Bytes()
}
