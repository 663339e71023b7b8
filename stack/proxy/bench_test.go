package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSOCKS5Bulk measures one stream client → proxy → sink over the
// standard library's loopback; b.SetBytes makes the result MB/s.
func BenchmarkSOCKS5Bulk(b *testing.B) {
	r := newRig(b, nil)
	sink := newTarget(b, "tcp", "127.0.0.1:0", func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		var ack [8]byte
		for i := range ack {
			ack[i] = byte(n >> (8 * i))
		}
		c.Write(ack[:])
	})
	conn, err := r.client().DialContext(context.Background(), "tcp", sink.addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	chunk := make([]byte, 256<<10)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := conn.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	conn.(*net.TCPConn).CloseWrite()
	var ack [8]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}

// BenchmarkSOCKS5Connect measures CONNECT + 1-byte echo + close, one
// after another; ns/op is the cost of one proxied connection.
func BenchmarkSOCKS5Connect(b *testing.B) {
	r := newRig(b, nil)
	tg := newTarget(b, "tcp", "127.0.0.1:0", echo)
	c := r.client()
	dst := tg.addr().String()
	one := []byte{'x'}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		conn, err := c.DialContext(context.Background(), "tcp", dst)
		if err != nil {
			b.Fatal(err)
		}
		conn.Write(one)
		if _, err := io.ReadFull(conn, one); err != nil {
			b.Fatal(err)
		}
		conn.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
}

// BenchmarkUDPAssociateRoundTrip measures one datagram through the
// association to an echo server and back.
func BenchmarkUDPAssociateRoundTrip(b *testing.B) {
	r := newRig(b, nil)
	e := udpEcho(b, "udp4", "127.0.0.1:0")
	u, err := r.client().ListenUDP(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer u.Close()
	msg := make([]byte, 1200)
	buf := make([]byte, 2048)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		u.WriteTo(msg, e.LocalAddr())
		if _, _, err := u.ReadFrom(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHTTPForward measures one keep-alive GET forwarded to an
// origin on the loopback and its 16 KiB response (Content-Length and the
// fields a net/http server sends), one after another on one client
// connection and one pooled origin connection: ns/op and allocs/op are
// the whole round trip's, the client's and origin's included.
func BenchmarkHTTPForward(b *testing.B) {
	r := newRig(b, nil)
	body := strings.Repeat("x", 16<<10)
	resp := "HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nContent-Type: application/octet-stream\r\nDate: Wed, 02 Dec 2026 20:00:00 GMT\r\n" +
		"Last-Modified: Wed, 02 Dec 2026 19:00:00 GMT\r\n\r\n" + body
	tg := newTarget(b, "tcp", "127.0.0.1:0", answerEach(resp))
	// The pool keeps the origin connection open: close the proxy before
	// the target's cleanup waits for its handler (else it waits for the
	// handler's 30 s deadline).
	b.Cleanup(func() { r.srv.Close() })
	c := r.raw()
	defer c.Close()
	br := bufio.NewReader(c)
	host := tg.addr().String()
	req := "GET http://" + host + "/obj/7 HTTP/1.1\r\nHost: " + host +
		"\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n"
	get := &http.Request{Method: http.MethodGet}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for range b.N {
		if _, err := io.WriteString(c, req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, get)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != int64(len(body)) {
			b.Fatal(n, err)
		}
	}
	// The process's CPU (every goroutine's, system calls included): wall
	// time on a shared machine says more about the neighbours.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the process's user and system CPU time, getrusage(2).
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
