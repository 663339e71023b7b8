package proxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// origin is an HTTP server the proxy forwards to.
func origin(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s proxy-auth=%q", r.Method, r.URL.RequestURI(), body, r.Header.Get("Proxy-Authorization"))
		case "/chunked":
			for i := range 3 {
				fmt.Fprintf(w, "chunk%d;", i)
				w.(http.Flusher).Flush()
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// proxiedClient is net/http's client with the proxy as its HTTP proxy:
// absolute-URI requests for http://, CONNECT for https://.
func proxiedClient(t testing.TB, proxyAddr string, user *url.Userinfo) *http.Client {
	pu := &url.URL{Scheme: "http", Host: proxyAddr, User: user}
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(t testing.TB, c *http.Client, method, u, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPForwardsAbsoluteURIRequestsWithKeepAlive(t *testing.T) {
	r := newRig(t, nil)
	o := origin(t)
	c := proxiedClient(t, r.addr, nil)
	for i := range 3 {
		code, body := get(t, c, "POST", o.URL+"/echo?i="+fmt.Sprint(i), "payload")
		if code != 200 || body != fmt.Sprintf(`POST /echo?i=%d payload proxy-auth=""`, i) {
			t.Errorf("got %d %q", code, body)
		}
	}
	if code, body := get(t, c, "GET", o.URL+"/chunked", ""); code != 200 || body != "chunk0;chunk1;chunk2;" {
		t.Errorf("chunked: %d %q", code, body)
	}
	if code, _ := get(t, c, "GET", o.URL+"/missing", ""); code != 404 {
		t.Errorf("404 became %d", code)
	}
	// With a name, through the resolver.
	u := strings.Replace(o.URL, "127.0.0.1", "localhost.test", 1)
	if code, _ := get(t, c, "HEAD", u+"/echo", ""); code != 200 {
		t.Errorf("HEAD by name: %d", code)
	}
	s := r.srv.Stats()
	if s.HTTPForwards != 6 || s.ConnsAccepted != 1 {
		t.Errorf("want 6 forwards on one kept-alive client connection: %+v", s)
	}
}

func TestHTTPConnectTunnelsAndHalfCloses(t *testing.T) {
	r := newRig(t, nil)
	tg := newTarget(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		b, _ := io.ReadAll(c)
		c.Write(bytes.ToUpper(b))
	})
	c := r.raw()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly ", tg.addr(), tg.addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	c.Write([]byte("data"))
	c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(br)
	if string(got) != "EARLY DATA" {
		t.Errorf("got %q", got)
	}
	if r.srv.Stats().HTTPConnects != 1 {
		t.Errorf("stats %+v", r.srv.Stats())
	}
}

func TestHTTPProxyAuthentication(t *testing.T) {
	r := newRig(t, func(s *Server) { s.Credentials = CheckPassword("bob", "pw") })
	o := origin(t)
	if code, _ := get(t, proxiedClient(t, r.addr, nil), "GET", o.URL+"/echo", ""); code != 407 {
		t.Errorf("no credentials: %d, want 407", code)
	}
	if code, _ := get(t, proxiedClient(t, r.addr, url.UserPassword("bob", "no")), "GET", o.URL+"/echo", ""); code != 407 {
		t.Errorf("wrong password: %d, want 407", code)
	}
	code, body := get(t, proxiedClient(t, r.addr, url.UserPassword("bob", "pw")), "GET", o.URL+"/echo", "")
	if code != 200 || body != `GET /echo  proxy-auth=""` {
		// The credentials are for the proxy and must not reach the origin.
		t.Errorf("got %d %q", code, body)
	}
	// CONNECT with Basic credentials.
	tg := newTarget(t, "tcp", "127.0.0.1:0", echo)
	c := r.raw()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nProxy-Authorization: Basic %s\r\n\r\n", tg.addr(), base64.StdEncoding.EncodeToString([]byte("bob:pw")))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if got := r.srv.Stats().AuthFailures; got != 2 {
		t.Errorf("AuthFailures = %d", got)
	}
}

func TestHTTPMalformedRequestsGetAnErrorStatus(t *testing.T) {
	r := newRig(t, nil)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		req  string
		want string
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400"},            // origin-form: not a proxy request
		{"GET https://x/ HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400"},   // TLS must use CONNECT
		{"CONNECT nopart HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},              // no port
		{"CONNECT a:99999 HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},             // port out of range
		{"GARBAGE\r\n\r\n", "HTTP/1.1 400"},                              // not HTTP
		{"GET http://x/ HTTP/1.1\r\nBad Header\r\n\r\n", "HTTP/1.1 400"}, // malformed header
		{"CONNECT nosuch.test:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 502"},     // resolver says no
		{"CONNECT " + refused + " HTTP/1.1\r\n\r\n", "HTTP/1.1 502"},     // refused
		{"GET http://x/ HTTP/1.1\r\nX: " + strings.Repeat("a", 70000) + "\r\n\r\n", "HTTP/1.1 431"},
	} {
		c := r.raw()
		go io.WriteString(c, tc.req)
		b, _ := io.ReadAll(c)
		if !strings.HasPrefix(string(b), tc.want) {
			t.Errorf("%.40q: got %.80q, want %s", tc.req, b, tc.want)
		}
	}
	if got := r.srv.Stats().BadRequests; got != 7 {
		t.Errorf("BadRequests = %d, want 7", got)
	}
}
