package main

import (
	"net/http"
	"reflect"
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	kind func(field string) prometheus.ValueType
	// perDevice marks the modem's own counters (the MHI controller's),
	// which every session of that modem shares: they are exported once
	// per device, labelled with the device only.
	perDevice bool
	// labels are the series' labels, e.g. device and listen; serve sets
	// them.
	labels prometheus.Labels
	// collect, when set, sends the source's metrics itself (with the
	// labels) instead of stats' fields.
	collect func(ch chan<- prometheus.Metric, labels prometheus.Labels)
}

// proxyKind: the proxy's Stats mark gauges with an "Active" suffix.
func proxyKind(field string) prometheus.ValueType {
	if strings.HasSuffix(field, "Active") {
		return prometheus.GaugeValue
	}
	return prometheus.CounterValue
}

// metricsHandler serves the sources' metrics, with client_golang's go_*
// (runtime) and process_* ones, in the format the scraper asks for (the
// text format by default). client_golang groups each family's series
// and sorts the families and series.
func metricsHandler(sources []metricSource) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		statsCollector(sources))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// statsCollector reads the sources' Stats when scraped: the data path
// only counts. It is an unchecked collector (Describe sends nothing), as
// its metrics are the fields of whatever the sources return; the
// registry still checks every scrape (one type per family, no series
// twice) and answers 500 if it is wrong.
type statsCollector []metricSource

func (statsCollector) Describe(chan<- *prometheus.Desc) {}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, src := range c {
		if src.collect != nil {
			src.collect(ch, src.labels)
			continue
		}
		collectFields(ch, "mhiproxy_"+src.name, reflect.ValueOf(src.stats()), src.kind, src.labels)
	}
}

// collectFields sends v's exported numeric fields as metrics, descending
// into nested structs and non-nil pointers to structs (whose fields are
// untyped). The help text names the Go field, e.g. link.Stats.RXPackets.
func collectFields(ch chan<- prometheus.Metric, prefix string, v reflect.Value, kind func(string) prometheus.ValueType, labels prometheus.Labels) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		name := prefix + "_" + snake(f.Name)
		var x float64
		switch fv.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			x = float64(fv.Uint())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			x = float64(fv.Int())
		case reflect.Float32, reflect.Float64:
			x = fv.Float()
		case reflect.Bool:
			if fv.Bool() {
				x = 1
			}
		case reflect.Struct, reflect.Pointer:
			collectFields(ch, name, fv, nil, labels)
			continue
		default:
			continue
		}
		typ := prometheus.UntypedValue
		if kind != nil {
			typ = kind(f.Name)
		}
		desc := prometheus.NewDesc(name, t.String()+"."+f.Name, nil, labels)
		m, err := prometheus.NewConstMetric(desc, typ, x)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
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
