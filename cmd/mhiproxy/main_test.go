package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/stack/proxy"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hostNetwork stands in for a brought-up modem over the host's network,
// so that everything but the bring-up is tested here.
type hostNetwork struct {
	net.Dialer
	closed atomic.Bool
	dials  atomic.Uint64 // for its stack metrics
}

func (h *hostNetwork) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	h.dials.Add(1)
	return h.Dialer.DialContext(ctx, network, address)
}

func (h *hostNetwork) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if host == "origin.test" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}
func (h *hostNetwork) ListenPacket(network, address string) (net.PacketConn, error) {
	return net.ListenPacket(network, address)
}
func (h *hostNetwork) Describe() string { return "host/test" }
func (h *hostNetwork) Addresses() []netip.Prefix {
	return []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32")}
}
func (h *hostNetwork) Metrics() []metricSource {
	type linkStats struct{ RXPackets, TXPackets uint64 }
	type stackStats struct {
		ActiveTCPConns int
		Dialed         uint64
		Link           *linkStats
	}
	type mhiStats struct{ Interrupts uint64 }
	return []metricSource{
		{name: "stack", stats: func() any { return stackStats{3, h.dials.Load(), &linkStats{10, 20}} }},
		{name: "mhi", stats: func() any { return mhiStats{42} }, perDevice: true},
	}
}
func (h *hostNetwork) CapturePcap(w io.Writer) (func() error, error) {
	return func() error { return nil }, nil
}
func (h *hostNetwork) ServeMBIMProxy(string) (func() error, error) {
	return nil, errors.New("no MBIM on the host")
}
func (h *hostNetwork) ServeQMIProxy(string) (func() error, error) {
	return nil, errors.New("no QMI on the host")
}
func (h *hostNetwork) OpenSession(context.Context, sessionSpec) (network, error) {
	return &hostNetwork{}, nil
}
func (h *hostNetwork) Close() error { h.closed.Store(true); return nil }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestBadFlagsExitTwoWithAMessage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-listen", "0.0.0.0:1080"}, "refusing to run an open proxy"},
		{[]string{"-listen", ":1080"}, "refusing to run an open proxy"},
		{[]string{"-device", "eth0"}, "want sim, sim:PROFILE, a PCI address like 0000:01:00.0 or vfio-user:PATH"},
		{[]string{"-device", "sim:nosuch"}, `no such modem profile "nosuch"`},
		{[]string{"-device", "0000:01:00.0", "-device", "0000:01:00.0"}, "given twice"},
		{[]string{"-device", "sim", "-device", "sim"}, "-device sim has no -session"},
		{[]string{"-session", "apn=ims"}, "listen=ADDR is required"},
		{[]string{"-session", "apn=ims,listen=127.0.0.1:0,color=red"}, `unknown key "color"`},
		{[]string{"-session", "apn=ims,apn=x,listen=127.0.0.1:0"}, "apn given twice"},
		{[]string{"-session", "listen=127.0.0.1:0,device=x"}, "want the index of a -device flag"},
		{[]string{"-session", "listen=127.0.0.1:0,device=1"}, "there are 1 -device flags"},
		{[]string{"-session", "listen=0.0.0.0:1081"}, "refusing to run an open proxy"},
		{[]string{"-session", "listen=nope"}, "-session listen="},
		{[]string{"-device", "vfio-user:"}, "want sim, sim:PROFILE, a PCI address"},
		{[]string{"-auth", "nocolon"}, "want user:pass or random"},
		{[]string{"-log-level", "loud"}, "want debug, info, warn or error"},
		{[]string{"-listen", "nope"}, "-listen"},
		{[]string{"-nosuchflag"}, "flag provided but not defined"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-control", "at"}, "want mbim or qmi"},
		{[]string{"-profile", "nosuch"}, "no such modem profile"},
		{[]string{"-control", "qmi", "-mbim-proxy"}, "-mbim-proxy needs an MBIM data session"},
		{[]string{"-control", "mbim", "-qmi-proxy"}, "-qmi-proxy needs a QMI data session"},
		{[]string{"-mbim-proxy", "-qmi-proxy=x"}, "the data session runs on one control protocol"},
		{[]string{"-qmi-proxy=a/b"}, "without '/'"},
		{[]string{"-pool-idle", "0"}, "must be positive"},
		{[]string{"-pool-idle-per-origin", "0"}, "or -1 for no pool"},
		{[]string{"-pool-idle-timeout", "-1s"}, "must be positive"},
	} {
		var stderr syncBuffer
		code := run(context.Background(), tc.args, io.Discard, &stderr, nil)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	var stderr syncBuffer
	if code := run(context.Background(), []string{"-help"}, io.Discard, &stderr, nil); code != 0 {
		t.Errorf("-help exit %d", code)
	}
	for _, f := range []string{"-device", "-apn", "-apn-user", "-apn-password", "-listen", "-auth", "-metrics", "-pcap", "-mbim-proxy", "-qmi-proxy", "-log-level", "-profile", "-control", "-session"} {
		if !strings.Contains(stderr.String(), "  "+f+" ") && !strings.Contains(stderr.String(), "  "+f+"\n") {
			t.Errorf("help does not explain %s", f)
		}
	}
}

func TestFailedBringUpExitsOneAndSaysWhy(t *testing.T) {
	var stderr syncBuffer
	// No such PCI device: vfio.Open fails at once.
	code := run(context.Background(), []string{"-listen", "127.0.0.1:0", "-device", "0000:ff:1f.7"}, io.Discard, &stderr, openModem)
	if code != 1 || !strings.Contains(stderr.String(), "bringing up 0000:ff:1f.7") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// startProxy runs mhiproxy over the host network until the returned stop.
func startProxy(t *testing.T, args ...string) (stdout *syncBuffer, proxyAddr, metricsAddr string, stop func() int) {
	t.Helper()
	stdout = &syncBuffer{}
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	// One host network per device (a later -device opens its own).
	var mu sync.Mutex
	var nws []*hostNetwork
	go func() {
		done <- run(ctx, append([]string{"-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0"}, args...), stdout, &stderr,
			func(context.Context, openOptions) (network, error) {
				mu.Lock()
				defer mu.Unlock()
				nws = append(nws, &hostNetwork{})
				return nws[len(nws)-1], nil
			})
	}()
	ready := regexp.MustCompile(`listening on (\S+) via host/test, ip 10\.0\.0\.7, metrics http://(\S+)/metrics`)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if m := ready.FindStringSubmatch(stdout.String()); m != nil {
			proxyAddr, metricsAddr = m[1], m[2]
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no ready line; stdout %q stderr %q", stdout.String(), stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	var once sync.Once
	code := -1
	stop = func() int {
		once.Do(func() {
			cancel()
			code = <-done
			for i, nw := range nws {
				if !nw.closed.Load() {
					t.Errorf("network %d not closed on shutdown", i)
				}
			}
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return stdout, proxyAddr, metricsAddr, stop
}

func TestServesProxyAndMetricsThenShutsDownCleanly(t *testing.T) {
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })}
	oln, _ := net.Listen("tcp", "127.0.0.1:0")
	go origin.Serve(oln)
	defer origin.Close()
	_, addr, maddr, stop := startProxy(t)

	c := &proxy.Client{Proxy: addr}
	conn, err := c.DialContext(context.Background(), "tcp", "origin.test:"+portOf(oln.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n")
	b, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.HasSuffix(string(b), "hello") {
		t.Errorf("through the proxy: %q", b)
	}

	m := scrape(t, maddr)
	main := `{device="0",listen="` + addr + `"}`
	for _, want := range []string{
		"# TYPE mhiproxy_proxy_socks_connects counter\nmhiproxy_proxy_socks_connects" + main + " 1\n",
		"# TYPE mhiproxy_proxy_conns_active gauge\n",
		"mhiproxy_proxy_bytes_down" + main + " ",
		"mhiproxy_stack_active_tcp_conns" + main + " 3\n",
		"mhiproxy_stack_link_rx_packets" + main + " 10\n",
		"mhiproxy_mhi_interrupts{device=\"0\"} 42\n",
		"# HELP mhiproxy_stack_link_rx_packets main.linkStats.RXPackets\n# TYPE mhiproxy_stack_link_rx_packets untyped\n",
		"# TYPE go_goroutines gauge\n",
		"# TYPE process_cpu_seconds_total counter\n",
		"# TYPE process_resident_memory_bytes gauge\n",
	} {
		if !strings.Contains(m.text, want) {
			t.Errorf("metrics lack %q:\n%s", want, m.text)
		}
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d after shutdown", code)
	}
}

func TestAuthRandomPrintsAWorkingPassword(t *testing.T) {
	stdout, addr, _, _ := startProxy(t, "-auth", "random")
	m := regexp.MustCompile(`auth: user mhiproxy password (\S+)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no password printed: %q", stdout.String())
	}
	tg, _ := net.Listen("tcp", "127.0.0.1:0")
	defer tg.Close()
	if _, err := (&proxy.Client{Proxy: addr}).DialContext(context.Background(), "tcp", tg.Addr().String()); err == nil {
		t.Error("connected without the password")
	}
	conn, err := (&proxy.Client{Proxy: addr, User: "mhiproxy", Password: m[1]}).DialContext(context.Background(), "tcp", tg.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

func TestSnakeCaseMetricNames(t *testing.T) {
	for in, want := range map[string]string{
		"UDPBytesUp":             "udp_bytes_up",
		"TXDroppedNoBufferSpace": "tx_dropped_no_buffer_space",
		"ConnsActive":            "conns_active",
		"RXPackets":              "rx_packets",
		"Link":                   "link",
		"IPv6Addrs":              "ipv6_addrs",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMetricsCoverEverySessionAndDevice: with a second session on the
// first device and a session on a second device, one scrape has every
// listener's proxy series and every session's stack series, labelled with
// the device index and the listener's address, and each device's MHI
// series once; it is valid text format (each family once, not
// interleaved); and a connection through the second listener moves that
// listener's and session's counters only.
func TestMetricsCoverEverySessionAndDevice(t *testing.T) {
	tg, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	stdout, addr, maddr, _ := startProxy(t, "-device", "sim", "-device", "sim",
		"-session", "apn=ims,listen=127.0.0.1:0", "-session", "device=1,apn=corp,listen=127.0.0.1:0")
	var ls []string
	for _, m := range regexp.MustCompile(`listening on (\S+) via host/test, apn \S+, ip`).FindAllStringSubmatch(stdout.String(), -1) {
		ls = append(ls, m[1])
	}
	if len(ls) != 2 {
		t.Fatalf("session ready lines: %q", stdout.String())
	}
	labels := []string{
		`{device="0",listen="` + addr + `"}`,
		`{device="0",listen="` + ls[0] + `"}`,
		`{device="1",listen="` + ls[1] + `"}`,
	}
	before := scrape(t, maddr)
	for _, l := range labels {
		for _, name := range []string{"mhiproxy_proxy_socks_connects", "mhiproxy_proxy_conns_accepted", "mhiproxy_stack_dialed", "mhiproxy_stack_link_rx_packets"} {
			if _, ok := before.series[name+l]; !ok {
				t.Errorf("no %s%s in\n%s", name, l, before.text)
			}
		}
	}
	before.checkOncePerDevice(t, "mhiproxy_mhi_interrupts", 2)

	conn, err := (&proxy.Client{Proxy: ls[0]}).DialContext(context.Background(), "tcp", tg.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	// The server counts the CONNECT once its reply is written: the client
	// may see the reply first.
	after := scrape(t, maddr)
	for deadline := time.Now().Add(10 * time.Second); after.series["mhiproxy_proxy_socks_connects"+labels[1]] == "0" && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		after = scrape(t, maddr)
	}
	for _, l := range labels {
		for _, name := range []string{"mhiproxy_proxy_socks_connects", "mhiproxy_stack_dialed"} {
			moved := after.series[name+l] != before.series[name+l]
			if wantMoved := l == labels[1]; moved != wantMoved {
				t.Errorf("%s%s: %s before, %s after a connection through %s", name, l, before.series[name+l], after.series[name+l], ls[0])
			}
		}
	}
	if got := after.series["mhiproxy_proxy_socks_connects"+labels[1]]; got != "1" {
		t.Errorf("second listener's socks_connects %s, want 1", got)
	}
}

// exposition is one scrape: its text and its series ("name{labels}" →
// value).
type exposition struct {
	text   string
	series map[string]string
}

// checkOncePerDevice checks that family has one series per device,
// labelled with the device only.
func (e exposition) checkOncePerDevice(t *testing.T, family string, devices int) {
	t.Helper()
	var got, want []string
	for k := range e.series {
		if strings.HasPrefix(k, family+"{") || k == family {
			got = append(got, k)
		}
	}
	for i := range devices {
		want = append(want, fmt.Sprintf(`%s{device="%d"}`, family, i))
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s series %q, want %q (once per device)", family, got, want)
	}
}

// scrape fetches /metrics from maddr and checks it is valid Prometheus text
// format (version 0.0.4): every sample's family declared by a TYPE line
// (after an optional HELP line) right before its series, each family
// once and its series together, no series twice.
func scrape(t *testing.T, maddr string) exposition {
	t.Helper()
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%s, Content-Type %q:\n%s", resp.Status, resp.Header.Get("Content-Type"), b)
	}
	e := exposition{text: string(b), series: map[string]string{}}
	if err := parseExposition(e.text, e.series); err != nil {
		t.Fatalf("invalid exposition: %v\n%s", err, e.text)
	}
	return e
}

// value returns a series' value as a number.
func (e exposition) value(t *testing.T, series string) float64 {
	t.Helper()
	s, ok := e.series[series]
	if !ok {
		t.Errorf("no series %s", series)
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Errorf("%s: %v", series, err)
	}
	return v
}

var (
	helpLine   = regexp.MustCompile(`^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$`)
	typeLine   = regexp.MustCompile(`^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|untyped|summary|histogram)$`)
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*)?\})? (-?[0-9][0-9.e+-]*|NaN|[+-]Inf)$`)
)

func parseExposition(text string, series map[string]string) error {
	if !strings.HasSuffix(text, "\n") {
		return errors.New("does not end in a newline")
	}
	declared := map[string]bool{}
	family, typ, help := "", "", ""
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if m := helpLine.FindStringSubmatch(line); m != nil {
			help = m[1]
			continue
		}
		if m := typeLine.FindStringSubmatch(line); m != nil {
			if declared[m[1]] {
				return fmt.Errorf("line %d: family %s declared again", i+1, m[1])
			}
			if help != "" && help != m[1] {
				return fmt.Errorf("line %d: HELP for %s before TYPE of %s", i+1, help, m[1])
			}
			declared[m[1]], family, typ, help = true, m[1], m[2], ""
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			return fmt.Errorf("line %d: %q is neither a HELP or TYPE line nor a sample", i+1, line)
		}
		if help != "" {
			return fmt.Errorf("line %d: HELP for %s without TYPE", i+1, help)
		}
		if name := m[1]; name != family {
			suffix, ok := strings.CutPrefix(name, family+"_")
			if !ok || !(typ == "summary" && (suffix == "sum" || suffix == "count") || typ == "histogram" && (suffix == "sum" || suffix == "count" || suffix == "bucket")) {
				return fmt.Errorf("line %d: %s sample outside its family (under %q)", i+1, name, family)
			}
		}
		if _, dup := series[m[1]+m[2]]; dup {
			return fmt.Errorf("line %d: series %s%s twice", i+1, m[1], m[2])
		}
		series[m[1]+m[2]] = m[3]
	}
	return nil
}

func TestExpositionCheckerCatchesBadText(t *testing.T) {
	for _, bad := range []string{
		"# TYPE a counter\na 1\n# TYPE b counter\nb 1\na{x=\"1\"} 2\n", // interleaved
		"# TYPE a counter\na 1\n# TYPE a counter\na{x=\"1\"} 2\n",      // declared twice
		"# TYPE a counter\na 1\na 2\n",                                 // series twice
		"a 1\n",                                                        // no TYPE
		"# HELP a x\na 1\n",                                            // HELP without TYPE
		"# TYPE a counter\na_sum 1\n",                                  // _sum of a counter
		"# TYPE a summary\na_total 1\n",                                // not a summary's sample
		"# TYPE a counter\na{x=1} 1\n",                                 // unquoted label
	} {
		if err := parseExposition(bad, map[string]string{}); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	good := "# TYPE a counter\na{d=\"0\",l=\"[::1]:80\"} 1\na{d=\"1\",l=\"q\\\"\"} 2\n# HELP b what b is\n# TYPE b gauge\nb 3\n" +
		"# TYPE c summary\nc{quantile=\"0.5\"} NaN\nc_sum 1.5e-05\nc_count 3\n"
	if err := parseExposition(good, map[string]string{}); err != nil {
		t.Errorf("rejected %q: %v", good, err)
	}
}

func portOf(a net.Addr) string { _, p, _ := net.SplitHostPort(a.String()); return p }
