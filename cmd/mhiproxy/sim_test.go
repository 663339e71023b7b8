package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack/proxy"
)

// TestOnTheEmulatedModem runs mhiproxy as the binary does (openModem →
// stack.Open on the emulated modem) and fetches from an HTTP server on
// the host's loopback through SOCKS5 and HTTP CONNECT, addressed as the
// carrier's 198.18.0.1 and by the name test.mhistack (answered by the
// modem's DNS), so every byte crosses proxy → stack → link → MHI →
// emulated modem → carrier network → host socket.
func TestOnTheEmulatedModem(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	body := strings.Repeat("mhistack through the modem\n", 40000) // ~1 MB
	port := startOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })

	pcap := filepath.Join(t.TempDir(), "link.pcap")
	mbimName := fmt.Sprintf("mhiproxy-test-%d", os.Getpid())
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-pcap", pcap,
			"-mbim-proxy=" + mbimName, "-apn", "internet", "-log-level", "warn"}, &stdout, &stderr, openModem)
	}()
	m := waitReady(t, `listening on (\S+) via sim/qcom-sdx55m, ip (\S+) (\S+), metrics http://(\S+)/metrics`, done, &stdout, &stderr)
	addr, maddr := m[1], m[4]
	car := simnet.DefaultCarrier()
	if m[2] != car.IPv4.Addr().String() || m[3] != car.IPv6.Addr().String() {
		t.Errorf("ready line says ip %s %s; the session has %v %v", m[2], m[3], car.IPv4, car.IPv6)
	}
	t.Log(strings.TrimSpace(stdout.String()))

	get := func(how string, conn net.Conn) {
		t.Helper()
		defer conn.Close()
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != body {
			t.Fatalf("%s: %d bytes (want %d), %v", how, len(b), len(body), err)
		}
	}

	c := &proxy.Client{Proxy: addr}
	for _, host := range []string{simnet.TestAddr4.String(), simnet.TestName} {
		conn, err := c.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
		if err != nil {
			t.Fatalf("SOCKS5 CONNECT %s: %v", host, err)
		}
		get("SOCKS5 to "+host, conn)
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(simnet.TestAddr4.String(), port)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP CONNECT: %v %v", resp, err)
	}
	if br.Buffered() != 0 {
		t.Fatalf("%d bytes after the CONNECT response", br.Buffered())
	}
	get("HTTP CONNECT", conn)

	// The libmbim proxy socket is there while mhiproxy runs.
	if uc, err := net.Dial("unix", "@"+mbimName); err != nil {
		t.Errorf("-mbim-proxy: %v", err)
	} else {
		uc.Close()
	}

	e := scrape(t, maddr)
	main := `{device="0",listen="` + addr + `"}`
	if !strings.Contains(e.text, "\n# TYPE mhiproxy_stack_active_tcp_conns gauge\n") {
		t.Error("mhiproxy_stack_active_tcp_conns is not a gauge")
	}
	for _, c := range []struct {
		series   string
		min, max float64
	}{
		{"mhiproxy_proxy_socks_connects" + main, 2, 2},
		{"mhiproxy_proxy_http_connects" + main, 1, 1},
		{"mhiproxy_stack_dialed" + main, 1, math.Inf(1)},
		{"mhiproxy_stack_link_rx_bytes" + main, 1e6, math.Inf(1)},
		{`mhiproxy_mhi_interrupts{device="0"}`, 1, math.Inf(1)},
	} {
		if v := e.value(t, c.series); v < c.min || v > c.max {
			t.Errorf("%s = %v, want %v to %v", c.series, v, c.min, c.max)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", e.text)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d; stderr %q", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30 s after the signal")
	}
	if fi, err := os.Stat(pcap); err != nil || fi.Size() < 1<<20 {
		t.Errorf("-pcap: %v, %v (want the fetched megabytes in it)", fi, err)
	}
}

// TestOnTheEmulatedQMIModem: -profile telit-fn980-hwv1 (QMI control only)
// brings the session up over QMI with QMAP data; a fetch through SOCKS5
// crosses it.
func TestOnTheEmulatedQMIModem(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	body := strings.Repeat("over QMI and QMAP\n", 20000)
	port := startOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
	qmiName := fmt.Sprintf("mhiproxy-qmi-test-%d", os.Getpid())
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-profile", "telit-fn980-hwv1", "-apn", "internet",
			"-qmi-proxy=" + qmiName, "-log-level", "warn"}, &stdout, &stderr, openModem)
	}()
	m := waitReady(t, `listening on (\S+) via sim/telit-fn980-hwv1`, done, &stdout, &stderr)
	c := &proxy.Client{Proxy: m[1]}
	conn, err := c.DialContext(ctx, "tcp", net.JoinHostPort(simnet.TestName, port))
	if err != nil {
		t.Fatalf("SOCKS5 CONNECT: %v", err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != body {
		t.Fatalf("%d bytes (want %d), %v", len(b), len(body), err)
	}
	// -qmi-proxy: a libqmi-protocol client shares the modem.
	qc, err := qmi.DialProxy(ctx, qmiName, "/dev/wwan0qmi0", qmi.Options{})
	if err != nil {
		t.Fatalf("-qmi-proxy: %v", err)
	}
	dms, err := qc.AllocateCID(ctx, qmi.ServiceDMS)
	if err != nil {
		t.Fatalf("-qmi-proxy: %v", err)
	}
	if r, err := qc.Service(qmi.ServiceDMS, dms).Do(ctx, qmi.NewRequest(qmi.ServiceDMS, qmi.DMSGetIDs)); err != nil || qmi.ParseIDs(r).IMEI == "" {
		t.Errorf("DMS Get IDs through -qmi-proxy: %v", err)
	}
	qc.Close()
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d; stderr %q", code, stderr.String())
	}
}

// waitReady waits (up to a minute) for mhiproxy's ready line matching
// pattern on stdout and returns its submatches; an early exit or no line
// fails the test.
func waitReady(t *testing.T, pattern string, done <-chan int, stdout, stderr *syncBuffer) []string {
	t.Helper()
	ready := regexp.MustCompile(pattern)
	for deadline := time.Now().Add(60 * time.Second); ; {
		select {
		case code := <-done:
			t.Fatalf("exit %d before ready; stdout %q stderr %q", code, stdout.String(), stderr.String())
		default:
		}
		if m := ready.FindStringSubmatch(stdout.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready line; stdout %q stderr %q", stdout.String(), stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// getThrough fetches / from the origin on the host's loopback through the
// proxy at addr with SOCKS5 (by the carrier's test name) and returns the
// body.
func getThrough(t *testing.T, ctx context.Context, addr, port string) string {
	t.Helper()
	c := &proxy.Client{Proxy: addr}
	conn, err := c.DialContext(ctx, "tcp", net.JoinHostPort(simnet.TestName, port))
	if err != nil {
		t.Fatalf("SOCKS5 CONNECT through %s: %v", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("through %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("through %s: %v", addr, err)
	}
	return string(b)
}

// TestSessionsAndDevices: -session serves a second data session of the
// same modem (the Foxconn T99W175's MBIM session 1 on APN ims) on its own
// listener, and a second -device (an emulated Telit FN980 v1, QMI) serves
// its session on a third; each listener's ready line names its session's
// own addresses, and an HTTP fetch through each reaches the host. One
// -metrics scrape then has each listener's proxy and session's stack and
// link counters, labelled with the device and the listener, moved by its
// fetch, and each modem's MHI counters once.
func TestSessionsAndDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up two emulated modems")
	}
	port := startOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello via "+r.Host) })

	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-profile", "foxconn-t99w175", "-fcc-unlock", "-apn", "internet",
			"-device", "sim", "-device", "sim:telit-fn980-hwv1",
			"-session", "apn=ims,listen=127.0.0.1:0",
			"-session", "device=1,apn=corp.mhistack,listen=127.0.0.1:0", "-log-level", "warn"}, &stdout, &stderr, openModem)
	}()
	m := waitReady(t, `(?s)listening on (\S+) via sim/foxconn-t99w175, ip (\S+) \S+, metrics http://(\S+)/metrics\n`+
		`listening on (\S+) via sim/foxconn-t99w175, apn ims, ip (\S+) \S+\n`+
		`listening on (\S+) via sim:telit-fn980-hwv1/telit-fn980-hwv1, apn corp.mhistack, ip (\S+)\n`, done, &stdout, &stderr)
	t.Log(strings.TrimSpace(stdout.String()))
	apns := simnet.DefaultAPNs()
	want := []string{apns[0].Carrier.IPv4.Addr().String(), apns[1].Carrier.ForSession(1).IPv4.Addr().String(), apns[2].Carrier.IPv4.Addr().String()}
	maddr := m[3]
	m = slices.Delete(m, 3, 4)
	for i, w := range want {
		if m[2+2*i] != w {
			t.Errorf("listener %d: ready line says ip %s, want %s", i, m[2+2*i], w)
		}
	}
	labels := []string{
		`{device="0",listen="` + m[1] + `"}`,
		`{device="0",listen="` + m[3] + `"}`,
		`{device="1",listen="` + m[5] + `"}`,
	}
	before := scrape(t, maddr)
	for i, addr := range []string{m[1], m[3], m[5]} {
		if got := getThrough(t, ctx, addr, port); !strings.HasPrefix(got, "hello via") {
			t.Errorf("through %s: %q", addr, got)
		}
		// Each fetch moves its own session's counters, not the others'.
		after := scrape(t, maddr)
		for j, l := range labels {
			for _, name := range []string{"mhiproxy_proxy_socks_connects", "mhiproxy_stack_dialed", "mhiproxy_stack_link_rx_packets"} {
				b, ok := before.series[name+l]
				if !ok {
					t.Fatalf("no %s%s in\n%s", name, l, before.text)
				}
				// Another session's link may see unrelated packets (router
				// advertisements): only its connection counters must stay.
				moved := after.series[name+l] != b
				if moved != (i == j) && (i == j || name != "mhiproxy_stack_link_rx_packets") {
					t.Errorf("fetch through %s: %s%s %s → %s", addr, name, l, b, after.series[name+l])
				}
			}
		}
		before = after
	}
	before.checkOncePerDevice(t, "mhiproxy_mhi_interrupts", 2)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d; stderr %q", code, stderr.String())
	}
}

// startOrigin serves h over HTTP on the host's loopback until the test
// ends and returns its port.
func startOrigin(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	origin := &http.Server{Handler: h}
	oln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go origin.Serve(oln)
	t.Cleanup(func() { origin.Close() })
	return portOf(oln.Addr())
}
