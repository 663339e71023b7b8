package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// FuzzSOCKS5Request feeds arbitrary bytes to the greeting, the RFC 1929
// sub-negotiation and the request parser. None may panic, and a request
// that parses must encode back to the bytes it came from.
func FuzzSOCKS5Request(f *testing.F) {
	f.Add([]byte{5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	f.Add([]byte{5, 1, 0, 3, 11, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm', 1, 187})
	f.Add([]byte{5, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 53})
	f.Add([]byte{5, 2, 0, 2, 1, 'u', 1, 'p'})
	f.Add([]byte{5, 1, 0, 3, 0, 0, 80})
	f.Add([]byte{1, 1, 'u', 1, 'p'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var buf [257]byte
		readGreeting(bytes.NewReader(b), buf[:])
		readUserPass(bytes.NewReader(b), buf[:])
		req, err := readRequest(bytes.NewReader(b), buf[:])
		if err != nil {
			return
		}
		enc := appendAddr([]byte{socks5Version, req.Cmd, 0}, req.Addr)
		if !bytes.HasPrefix(b, enc) {
			t.Fatalf("request % x re-encodes as % x", b, enc)
		}
	})
}

// FuzzUDPHeader checks the RFC 1928 §7 parser: no panic, the payload
// aliases the input's tail, and a parsed header re-encodes to its bytes.
func FuzzUDPHeader(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 8, 8, 8, 8, 0, 53, 'q'})
	f.Add([]byte{0, 0, 0, 3, 4, 'a', '.', 'b', 'c', 1, 187, 'x', 'y'})
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 7})
	f.Add([]byte{0, 0, 1, 1, 8, 8, 8, 8, 0, 53})
	f.Add([]byte{0, 0, 0, 3, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, payload, err := ParseUDPHeader(b)
		if err != nil {
			return
		}
		h := AppendUDPHeader(nil, a)
		if len(h)+len(payload) != len(b) || !bytes.Equal(h, b[:len(h)]) {
			t.Fatalf("% x parsed as %v + %d bytes; header re-encodes as % x", b, a, len(payload), h)
		}
	})
}

// FuzzHTTPProxyRequest feeds arbitrary request heads to the HTTP proxy
// reader: no panic, a refusal is an *httpError with a 4xx status, and an
// accepted request names a target whose name would fit a SOCKS5 ATYP 3.
func FuzzHTTPProxyRequest(f *testing.F) {
	f.Add([]byte("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"))
	f.Add([]byte("GET http://example.com/x?y HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: Basic YTpi\r\n\r\n"))
	f.Add([]byte("POST http://[::1]:8080/ HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte("CONNECT [::1 HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lr := &headerLimit{r: bytes.NewReader(b)}
		lr.reset()
		pr, err := readProxyRequest(bufio.NewReader(lr))
		if err != nil {
			var he *httpError
			if errors.As(err, &he) {
				if he.status < 400 || he.status > 499 {
					t.Fatalf("refusal with status %d", he.status)
				}
				return
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("unexpected error kind %T: %v", err, err)
			}
			return
		}
		if pr.req.Method != http.MethodConnect && !pr.req.URL.IsAbs() {
			t.Fatalf("accepted a non-proxy request %q", pr.req.RequestURI)
		}
		if pr.target.Name != "" {
			if _, err := checkName([]byte(pr.target.Name)); err != nil || len(pr.target.Name) > 255 {
				t.Fatalf("accepted bad name %q", pr.target.Name)
			}
		} else if !pr.target.IP.IsValid() {
			t.Fatal("accepted a request with no target")
		}
	})
}

// FuzzForwardRequestHead: whatever request head a client sends, the head
// the proxy writes toward the origin parses back as one request with the
// same method, target and framing, ends where it says (nothing the
// client wrote can start a second request: no smuggling), and carries no
// hop-by-hop field.
func FuzzForwardRequestHead(f *testing.F) {
	f.Add([]byte("GET http://x.test/a?b HTTP/1.1\r\nHost: y\r\nConnection: X-A\r\nX-A: 1\r\nX-B: 2\r\n\r\n"))
	f.Add([]byte("POST http://x.test:8080/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n"))
	f.Add([]byte("PUT http://[::1]:80/p HTTP/1.0\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"))
	f.Add([]byte("GET http://x.test/ HTTP/1.1\r\nX: a\rb\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pr, err := readProxyRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil || pr.connect {
			return
		}
		req := pr.req
		removeHopHeaders(req.Header)
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		if err := writeRequestHead(w, req, false); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		head := out.String()
		got, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			t.Fatalf("head %q from %q does not parse: %v", head, b, err)
		}
		if got.Method != req.Method || got.RequestURI != req.URL.RequestURI() || got.Host != req.URL.Host {
			t.Fatalf("%q became %s %s (Host %s), want %s %s (Host %s)", b, got.Method, got.RequestURI, got.Host, req.Method, req.URL.RequestURI(), req.URL.Host)
		}
		if got.ContentLength != req.ContentLength {
			t.Fatalf("%q: framing became length %d, was %d", b, got.ContentLength, req.ContentLength)
		}
		if got.ContentLength == 0 {
			if n, _ := io.Copy(io.Discard, got.Body); n != 0 {
				t.Fatalf("%q: the head %q carries %d bytes of body", b, head, n)
			}
		}
		for _, name := range hopHeaders {
			if name != "Transfer-Encoding" && name != "Trailer" && got.Header.Get(name) != "" {
				t.Fatalf("%q: hop-by-hop %s reached the origin: %q", b, name, head)
			}
		}
	})
}
