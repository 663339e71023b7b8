package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"
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
	closed bool
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
		Link           *linkStats
	}
	return []metricSource{{name: "stack", stats: func() any { return stackStats{3, &linkStats{10, 20}} }}}
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
func (h *hostNetwork) Close() error { h.closed = true; return nil }

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
	nw := &hostNetwork{}
	go func() {
		done <- run(ctx, append([]string{"-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0"}, args...), stdout, &stderr,
			func(context.Context, openOptions) (network, error) { return nw, nil })
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
			if !nw.closed {
				t.Error("network not closed on shutdown")
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

	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"# TYPE mhiproxy_proxy_socks_connects counter\nmhiproxy_proxy_socks_connects 1\n",
		"# TYPE mhiproxy_proxy_conns_active gauge\n",
		"mhiproxy_proxy_bytes_down ",
		"mhiproxy_stack_active_tcp_conns 3\n",
		"mhiproxy_stack_link_rx_packets 10\n",
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
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

func portOf(a net.Addr) string { _, p, _ := net.SplitHostPort(a.String()); return p }
