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

// TestHTTP10KeepAlive: an HTTP/1.0 client (ab -k) keeps its connection
// only when it asked with "Connection: keep-alive" and the response has a
// length, and is then told "Connection: keep-alive"; otherwise the proxy
// closes (RFC 9112 §9.3). A chunked origin body reaches it unchunked,
// ended by the close (§6.1).
func TestHTTP10KeepAlive(t *testing.T) {
	r := newRig(t, nil)
	o := origin(t)
	type exchange struct {
		req       string
		status    int
		body      string
		keepAlive bool // the response says Connection: keep-alive and the proxy keeps the connection
	}
	get := func(path, conn string) string {
		h := "GET " + o.URL + path + " HTTP/1.0\r\nHost: " + strings.TrimPrefix(o.URL, "http://") + "\r\n"
		if conn != "" {
			h += "Connection: " + conn + "\r\n"
		}
		return h + "\r\n"
	}
	for _, tc := range []struct {
		name  string
		steps []exchange
	}{
		{"keep-alive, three requests on one connection", []exchange{
			{get("/echo", "Keep-Alive"), 200, `GET /echo  proxy-auth=""`, true},
			{get("/missing", "keep-alive"), 404, "404 page not found\n", true},
			{get("/echo", "Keep-Alive"), 200, `GET /echo  proxy-auth=""`, true},
		}},
		{"keep-alive, then a request without it", []exchange{
			{get("/echo", "Keep-Alive"), 200, `GET /echo  proxy-auth=""`, true},
			{get("/echo", ""), 200, `GET /echo  proxy-auth=""`, false},
		}},
		{"no keep-alive asked", []exchange{{get("/echo", ""), 200, `GET /echo  proxy-auth=""`, false}}},
		{"keep-alive asked, chunked origin body", []exchange{{get("/chunked", "Keep-Alive"), 200, "chunk0;chunk1;chunk2;", false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := r.raw()
			br := bufio.NewReader(c)
			for i, ex := range tc.steps {
				if _, err := io.WriteString(c, ex.req); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("request %d body: %v", i, err)
				}
				if resp.StatusCode != ex.status || string(body) != ex.body {
					t.Errorf("request %d: %d %q, want %d %q", i, resp.StatusCode, body, ex.status, ex.body)
				}
				if len(resp.TransferEncoding) > 0 {
					t.Errorf("request %d: Transfer-Encoding %v sent to an HTTP/1.0 client", i, resp.TransferEncoding)
				}
				ka := strings.EqualFold(resp.Header.Get("Connection"), "keep-alive")
				if ka != ex.keepAlive {
					t.Errorf("request %d: Connection %q, want keep-alive=%v", i, resp.Header.Get("Connection"), ex.keepAlive)
				}
				if ex.keepAlive && resp.ContentLength < 0 {
					t.Errorf("request %d: kept alive without a length", i)
				}
				if !ex.keepAlive {
					// The 1.0 client learns the end from the close.
					expectClosed(t, c)
					if i != len(tc.steps)-1 {
						t.Fatalf("closed after request %d", i)
					}
				}
			}
		})
	}
}

// TestHTTPForwardStreamsABodyPieceByPiece: the proxy gathers a
// response's writes, but sends each body piece before it waits for the
// next one from the origin.
func TestHTTPForwardStreamsABodyPieceByPiece(t *testing.T) {
	r := newRig(t, nil)
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "piece%d;", i)
			w.(http.Flusher).Flush()
			if i < 2 {
				<-next // the client must have the piece before the next is written
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		// Unblock the handler if the test failed half way.
		for {
			select {
			case next <- struct{}{}:
			default:
				return
			}
		}
	})
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		c := r.raw()
		fmt.Fprintf(c, "GET %s/ %s\r\nHost: x\r\n\r\n", srv.URL, proto)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			want := fmt.Sprintf("piece%d;", i)
			got := make([]byte, len(want))
			if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != want {
				t.Fatalf("%s: piece %d: %q, %v", proto, i, got, err)
			}
			if i < 2 {
				next <- struct{}{}
			}
		}
		resp.Body.Close()
	}
}
