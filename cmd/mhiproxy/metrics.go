package main

import (
	"bufio"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"unicode"
)

// A metric source is a named snapshot function: "proxy" → Server.Stats,
// "stack" → Stack.Stats (which carries the link's), "mhi" → the
// controller's. Their numeric fields become Prometheus metrics named
// mhiproxy_<source>_<field in snake case>, read at scrape time.
type metricSource struct {
	name  string
	stats func() any
	// kind tells counters from gauges by field name; nil means the
	// source's fields are exported as untyped.
	kind func(field string) string
	// perDevice marks the modem's own counters (the MHI controller's),
	// which every session of that modem shares: they are exported once
	// per device, labelled with the device only.
	perDevice bool
	// labels are the series' labels, e.g. {device="0",listen="…"}
	// (metricLabels); serve sets them.
	labels string
}

// metricLabels renders Prometheus labels from name, value pairs, with
// the values escaped as the text format wants.
func metricLabels(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(kv[i+1]))
		b.WriteByte('"')
	}
	if b.Len() == 0 {
		return ""
	}
	return "{" + b.String() + "}"
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// proxyKind: the proxy's Stats mark gauges with an "Active" suffix.
func proxyKind(field string) string {
	if strings.HasSuffix(field, "Active") {
		return "gauge"
	}
	return "counter"
}

// metricsHandler serves the Prometheus text exposition format (version
// 0.0.4). It is written here rather than pulled in with client_golang:
// every metric is a plain number read from a Stats struct, which the text
// format expresses in a few lines, and the module stays free of
// client_golang's dependency tree.
//
// The format wants each metric family once: one TYPE line, then all its
// series together. Several sources share names (every session has its
// mhiproxy_stack_dialed), so a scrape collects every source's samples
// first and writes them grouped by name, sorted, each family's series in
// the order of sources.
func metricsHandler(sources []metricSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fams := map[string]*metricFamily{}
		for _, src := range sources {
			collectMetrics(fams, "mhiproxy_"+src.name, src.labels, src.stats(), src.kind)
		}
		names := make([]string, 0, len(fams))
		for n := range fams {
			names = append(names, n)
		}
		sort.Strings(names)
		bw := bufio.NewWriter(w)
		for _, n := range names {
			f := fams[n]
			fmt.Fprintf(bw, "# TYPE %s %s\n", n, f.typ)
			for _, s := range f.series {
				fmt.Fprintf(bw, "%s%s %s\n", n, s.labels, s.value)
			}
		}
		bw.Flush()
	})
}

// A metricFamily is one metric name's type and series.
type metricFamily struct {
	typ    string
	series []struct{ labels, value string }
}

// collectMetrics adds v's exported numeric fields to fams, descending into
// nested structs and non-nil pointers to structs.
func collectMetrics(fams map[string]*metricFamily, prefix, labels string, v any, kind func(string) string) {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return
	}
	rt := rv.Type()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := rv.Field(i)
		name := prefix + "_" + snake(f.Name)
		var value string
		switch fv.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			value = fmt.Sprint(fv.Uint())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			value = fmt.Sprint(fv.Int())
		case reflect.Float32, reflect.Float64:
			value = fmt.Sprint(fv.Float())
		case reflect.Bool:
			value = "0"
			if fv.Bool() {
				value = "1"
			}
		case reflect.Struct, reflect.Pointer:
			collectMetrics(fams, name, labels, fv.Interface(), nil)
			continue
		default:
			continue
		}
		fam := fams[name]
		if fam == nil {
			typ := "untyped"
			if kind != nil {
				typ = kind(f.Name)
			}
			fam = &metricFamily{typ: typ}
			fams[name] = fam
		}
		fam.series = append(fam.series, struct{ labels, value string }{labels, value})
	}
}

// snake turns a Go field name into a metric name part: "UDPBytesUp" →
// "udp_bytes_up", "TXDroppedNoBufferSpace" → "tx_dropped_no_buffer_space".
func snake(s string) string {
	// "IPv6" would otherwise split as I_Pv6.
	s = strings.NewReplacer("IPv4", "Ipv4", "IPv6", "Ipv6").Replace(s)
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || (unicode.IsUpper(r[i-1]) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
