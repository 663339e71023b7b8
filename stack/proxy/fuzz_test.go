package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
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
