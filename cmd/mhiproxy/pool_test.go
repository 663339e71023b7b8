package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPoolFlagsReachTheForwardProxy: HTTP forwarding reuses one origin
// connection by default, the pool's hits and misses are metrics, and
// -pool-idle-per-origin=-1 turns the pool off.
func TestPoolFlagsReachTheForwardProxy(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		accepts      int64
		hits, misses string
	}{
		{nil, 1, "2", "1"},
		{[]string{"-pool-idle-per-origin=-1"}, 3, "0", "3"},
	} {
		var accepts atomic.Int64
		origin := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }),
			ConnState: func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					accepts.Add(1)
				}
			},
		}
		oln, _ := net.Listen("tcp", "127.0.0.1:0")
		go origin.Serve(oln)
		_, addr, maddr, stop := startProxy(t, tc.args...)
		tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}
		c := &http.Client{Transport: tr}
		for range 3 {
			resp, err := c.Get("http://origin.test:" + portOf(oln.Addr()) + "/")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "hello" {
				t.Errorf("%v: got %q", tc.args, b)
			}
		}
		tr.CloseIdleConnections()
		m := scrape(t, maddr)
		main := `{device="0",listen="` + addr + `"}`
		for _, want := range []string{
			"mhiproxy_proxy_http_pool_hits" + main + " " + tc.hits + "\n",
			"mhiproxy_proxy_http_pool_misses" + main + " " + tc.misses + "\n",
		} {
			if !strings.Contains(m.text, want) {
				t.Errorf("%v: metrics lack %q", tc.args, want)
			}
		}
		if code := stop(); code != 0 {
			t.Errorf("exit %d after shutdown", code)
		}
		origin.Close()
		if got := accepts.Load(); got != tc.accepts {
			t.Errorf("%v: origin accepted %d connections for 3 requests, want %d", tc.args, got, tc.accepts)
		}
	}
}
