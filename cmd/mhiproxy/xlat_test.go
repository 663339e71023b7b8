package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack/proxy"
)

// TestXLATProxiesIPv4LiteralsOverAnIPv6OnlyAPN runs mhiproxy on the
// emulated modem's IPv6-only APN with a network-specific NAT64 prefix
// (v6only-nsp.mhistack): the session has no IPv4 address, yet SOCKS5 and
// HTTP CONNECT to the IPv4 literal 198.18.0.1 reach the origin on the
// host's loopback, through the stack's CLAT and the carrier's NAT64.
func TestXLATProxiesIPv4LiteralsOverAnIPv6OnlyAPN(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	body := strings.Repeat("464XLAT\n", 20000)
	port := startOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-apn", "v6only-nsp.mhistack", "-log-level", "warn"}, &stdout, &stderr, openModem)
	}()
	m := waitReady(t, `listening on (\S+) via sim/qcom-sdx55m, ip (\S+), metrics http://(\S+)/metrics\n`, done, &stdout, &stderr)
	addr := m[1]
	if a, err := netip.ParseAddr(m[2]); err != nil || !a.Is6() {
		t.Fatalf("ready line says ip %s: not an IPv6-only session", m[2])
	}
	target := net.JoinHostPort(simnet.TestAddr4.String(), port)
	get := func(how string, conn net.Conn, br *bufio.Reader) {
		t.Helper()
		defer conn.Close()
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n")
		if br == nil {
			br = bufio.NewReader(conn)
		}
		resp, err := http.ReadResponse(br, nil)
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
	conn, err := c.DialContext(ctx, "tcp", target)
	if err != nil {
		t.Fatalf("SOCKS5 CONNECT %s: %v", target, err)
	}
	get("SOCKS5", conn, nil)

	conn, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP CONNECT %s: %v %v", target, resp, err)
	}
	get("HTTP CONNECT", conn, br)

	e := scrape(t, m[3])
	main := `{device="0",listen="` + addr + `"}`
	if v := e.value(t, "mhiproxy_stack_clat_translated"+main); v < 10 {
		t.Errorf("mhiproxy_stack_clat_translated = %v after two fetches through the CLAT", v)
	}

	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d; stderr %q", code, stderr.String())
	}
}
