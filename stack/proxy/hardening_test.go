package proxy

import (
	"io"
	"strings"
	"testing"
	"time"
)

// The handshake deadline runs from accept, not from the last byte: a
// slowloris client that drips a byte well inside any per-read timeout is
// still cut off once HandshakeTimeout has passed since it connected, and
// counted as a timeout. (A request line cut off mid-way used to be
// answered 400 and counted as malformed: bufio's ReadLine hands back the
// partial line without the deadline error.)
func TestHandshakeDeadlineCutsADripFeedingClient(t *testing.T) {
	const ht = 300 * time.Millisecond
	r := newRig(t, func(s *Server) { s.HandshakeTimeout = ht })
	for _, drip := range []string{
		// SOCKS5: greeting, then a CONNECT to a 200-byte name.
		"\x05\x01\x00\x05\x01\x00\x03\xc8" + strings.Repeat("a", 200),
		// HTTP: a request whose header lines never end.
		"GET http://x/ HTTP/1.1\r\n" + strings.Repeat("X-Drip: 1\r\n", 40),
	} {
		c := r.raw()
		start := time.Now()
		closed := make(chan time.Duration, 1)
		go func() {
			io.Copy(io.Discard, c)
			closed <- time.Since(start)
		}()
		var sent int
	drip:
		for i := 0; i < len(drip); i++ {
			select {
			case d := <-closed:
				closed <- d
				break drip
			default:
			}
			if _, err := c.Write([]byte{drip[i]}); err != nil {
				break
			}
			sent++
			time.Sleep(20 * time.Millisecond)
		}
		select {
		case d := <-closed:
			if sent == len(drip) {
				t.Errorf("%.20q: the whole drip (%d bytes over %v) went in before the proxy closed", drip, sent, d)
			}
			t.Logf("%.12q: cut after %d bytes, %v after connecting (HandshakeTimeout %v)", drip, sent, d.Round(time.Millisecond), ht)
		case <-time.After(10 * time.Second):
			t.Fatalf("%.20q: still open 10 s after connecting", drip)
		}
	}
	waitFor(t, "2 handshake timeouts", func() bool { return r.srv.Stats().HandshakeTimeouts == 2 })
	if n := r.srv.Stats().BadRequests; n != 0 {
		t.Errorf("%d bad requests: a head cut off by the deadline is not a malformed one", n)
	}
}

// Partial requests at every stage of both protocols time out, including
// the RFC 1929 sub-negotiation and an HTTP request line with no end.
func TestHandshakeTimesOutAtEveryStage(t *testing.T) {
	r := newRig(t, func(s *Server) {
		s.HandshakeTimeout = 150 * time.Millisecond
		s.Credentials = CheckPassword("u", "p")
	})
	for _, partial := range []string{
		"\x05\x01",                       // methods announced, not sent
		"\x05\x01\x02\x01",               // user/pass chosen; sub-negotiation: version only
		"\x05\x01\x02\x01\x05user",       // user name shorter than announced
		"\x05\x01\x02\x01\x01u\x01",      // password missing
		"\x05\x01\x02\x01\x01u\x01p\x05", // authenticated; request: version only
		"CONNECT 127.0.0.1:9 HTTP/1.1",   // request line without CRLF
		"CONNECT 127.0.0.1:9 HTTP/1.1\r\nProxy-Authorization: Basic dTpw\r\n", // head without its blank line
	} {
		c := r.raw()
		c.Write([]byte(partial))
		start := time.Now()
		b, _ := io.ReadAll(c)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%q: closed after %v", partial, d)
		}
		// What the proxy answered before the request was complete
		// (the method choice, the auth status) is all it may send.
		if strings.Contains(string(b), "HTTP/1.1 2") {
			t.Errorf("%q: got %q", partial, b)
		}
	}
	waitFor(t, "7 handshake timeouts", func() bool { return r.srv.Stats().HandshakeTimeouts == 7 })
}

// Malformed requests the other tests do not cover: each gets its
// protocol's error reply and the connection closes.
func TestMoreMalformedRequestsGetProtocolErrors(t *testing.T) {
	r := newRig(t, nil)
	authRig := newRig(t, func(s *Server) { s.Credentials = CheckPassword("u", "p") })
	for _, tc := range []struct {
		name  string
		rig   *rig
		send  string
		reply string // prefix
	}{
		{"UDP ASSOCIATE with an unknown address type", r, "\x05\x01\x00\x05\x03\x00\x09\x00\x00\x00\x00\x00\x00", "\x05\x00\x05\x08"},
		{"CONNECT with a name of control characters", r, "\x05\x01\x00\x05\x01\x00\x03\x02\x01\x02\x00\x50", "\x05\x00\x05\x01"},
		{"wrong password", authRig, "\x05\x01\x02\x01\x01u\x01x", "\x05\x02\x01\x01"},
		{"empty user name and password", authRig, "\x05\x01\x02\x01\x00\x00", "\x05\x02\x01\x01"},
		{"no-auth offered to a server that wants a password", authRig, "\x05\x01\x00", "\x05\xff"},
		{"HTTP version garbage", r, "GET http://x/ HTTP/9\r\n\r\n", "HTTP/1.1 400"},
		{"HTTP CONNECT without a target", r, "CONNECT  HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
		{"HTTP CONNECT to a name with a space", r, "CONNECT a%20b:80 HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
		// Request smuggling: two lengths for one body.
		{"HTTP with two different Content-Lengths", r, "POST http://x/ HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "HTTP/1.1 400"},
		{"HTTP CONNECT without credentials", authRig, "CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n", "HTTP/1.1 407"},
		{"HTTP CONNECT with a malformed Basic header", authRig, "CONNECT 127.0.0.1:9 HTTP/1.1\r\nProxy-Authorization: Basic !!!\r\n\r\n", "HTTP/1.1 407"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.rig.raw()
			go io.WriteString(c, tc.send)
			b, _ := io.ReadAll(c)
			if !strings.HasPrefix(string(b), tc.reply) {
				t.Errorf("got %q, want a reply starting %q", b, tc.reply)
			}
		})
	}
}
