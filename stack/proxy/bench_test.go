package proxy

import (
	"context"
	"io"
	"net"
	"testing"
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
