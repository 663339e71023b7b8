package main

import (
	"bufio"
	"fmt"
	"io"
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
}

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
func metricsHandler(sources []metricSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		bw := bufio.NewWriter(w)
		for _, src := range sources {
			writeMetrics(bw, "mhiproxy_"+src.name, src.stats(), src.kind)
		}
		bw.Flush()
	})
}

// writeMetrics walks v's exported numeric fields, descending into nested
// structs and non-nil pointers to structs.
func writeMetrics(w io.Writer, prefix string, v any, kind func(string) string) {
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
	type metric struct {
		name, kind string
		value      string
	}
	var ms []metric
	rt := rv.Type()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := rv.Field(i)
		name := prefix + "_" + snake(f.Name)
		switch fv.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			ms = append(ms, metric{name, f.Name, fmt.Sprint(fv.Uint())})
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			ms = append(ms, metric{name, f.Name, fmt.Sprint(fv.Int())})
		case reflect.Float32, reflect.Float64:
			ms = append(ms, metric{name, f.Name, fmt.Sprint(fv.Float())})
		case reflect.Bool:
			b := 0
			if fv.Bool() {
				b = 1
			}
			ms = append(ms, metric{name, f.Name, fmt.Sprint(b)})
		case reflect.Struct, reflect.Pointer:
			writeMetrics(w, name, fv.Interface(), nil)
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].name < ms[j].name })
	for _, m := range ms {
		typ := "untyped"
		if kind != nil {
			typ = kind(m.kind)
		}
		fmt.Fprintf(w, "# TYPE %s %s\n%s %s\n", m.name, typ, m.name, m.value)
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
