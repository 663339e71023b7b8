package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/stack"
	"github.com/mhistack/mhistack/stack/proxy"
)

// The benchmarks run a host client → mhiproxy's proxy server → stack →
// link → MHI → emulated modem → carrier network → a server on the host's
// loopback, addressed as the carrier's 198.18.0.1. "direct" is the same
// path without the proxy (the client dials through the stack in-process),
// for the proxy's share of the cost. Medians are in docs/PROXY.md:
//
//	go test -run X -bench Sim -count 5 ./cmd/mhiproxy/

// simRig is the emulated modem with the proxy server on it, as mhiproxy
// runs them, plus host servers: sink (reads to EOF, answers the count),
// source (reads an 8-byte count, writes that many bytes) and echo.
type simRig struct {
	nw                 network
	proxy              string
	sink, source, echo netip.AddrPort // as the modem reaches them
}

func newSimRig(b *testing.B) *simRig {
	b.Helper()
	ctx := context.Background()
	nw, err := openModem(ctx, openOptions{Device: "sim"})
	if err != nil {
		b.Fatal(err)
	}
	srv := &proxy.Server{Dialer: nw, Resolver: nw, PacketListener: proxy.PacketListenerFunc(func(_ context.Context, network, address string) (net.PacketConn, error) {
		return nw.ListenPacket(network, address)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	r := &simRig{nw: nw, proxy: ln.Addr().String()}
	var lns []net.Listener
	host := func(handle func(net.Conn)) netip.AddrPort {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns = append(lns, l)
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				wg.Go(func() { defer c.Close(); handle(c) })
			}
		})
		return netip.AddrPortFrom(simnet.TestAddr4, uint16(l.Addr().(*net.TCPAddr).Port))
	}
	r.sink = host(func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		binary.Write(c, binary.LittleEndian, n)
	})
	r.source = host(func(c net.Conn) {
		var n int64
		if binary.Read(c, binary.LittleEndian, &n) != nil {
			return
		}
		buf := make([]byte, 256<<10)
		for n > 0 {
			w, err := c.Write(buf[:min(n, int64(len(buf)))])
			if err != nil {
				return
			}
			n -= int64(w)
		}
	})
	r.echo = host(func(c net.Conn) { io.Copy(c, c) })
	b.Cleanup(func() {
		srv.Close()
		for _, l := range lns {
			l.Close()
		}
		nw.Close()
		wg.Wait()
	})
	return r
}

// dial connects to dst the way named: "direct" through the stack,
// "socks5" or "connect" (HTTP CONNECT) through the proxy.
func (r *simRig) dial(b *testing.B, how string, dst netip.AddrPort) net.Conn {
	ctx := context.Background()
	switch how {
	case "direct":
		c, err := r.nw.DialContext(ctx, "tcp4", dst.String())
		if err != nil {
			b.Fatal(err)
		}
		return c
	case "socks5":
		c, err := (&proxy.Client{Proxy: r.proxy}).DialContext(ctx, "tcp", dst.String())
		if err != nil {
			b.Fatal(err)
		}
		return c
	case "connect":
		c, err := net.Dial("tcp", r.proxy)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dst, dst)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 || br.Buffered() != 0 {
			b.Fatalf("CONNECT: %v, %v", resp, err)
		}
		return c
	}
	panic(how)
}

// reportTCP adds the stack's retransmits and retransmission timeouts:
// they tell a run that lost packets on the emulated link from one that
// did not.
func (r *simRig) reportTCP(b *testing.B) {
	st := r.nw.(*modem).Stats()
	b.ReportMetric(float64(st.TCPRetransmits), "retrans")
	b.ReportMetric(float64(st.TCPTimeouts), "RTOs")
}

var benchWays = []string{"direct", "socks5", "connect"}

// BenchmarkSimBulk moves one stream of b.N × 256 KiB: "up" from the
// client to the host sink (timed until the sink's count comes back),
// "down" from the host source to the client. MB/s is the result.
func BenchmarkSimBulk(b *testing.B) {
	const chunk = 256 << 10
	for _, dir := range []string{"up", "down"} {
		for _, how := range benchWays {
			b.Run(dir+"/"+how, func(b *testing.B) {
				r := newSimRig(b)
				defer r.reportTCP(b)
				buf := make([]byte, chunk)
				b.SetBytes(chunk)
				if dir == "up" {
					c := r.dial(b, how, r.sink)
					defer c.Close()
					b.ResetTimer()
					for range b.N {
						if _, err := c.Write(buf); err != nil {
							b.Fatal(err)
						}
					}
					c.(interface{ CloseWrite() error }).CloseWrite()
					var n int64
					if err := binary.Read(c, binary.LittleEndian, &n); err != nil || n != int64(b.N)*chunk {
						b.Fatalf("sink got %d of %d bytes: %v", n, int64(b.N)*chunk, err)
					}
					return
				}
				c := r.dial(b, how, r.source)
				defer c.Close()
				b.ResetTimer()
				want := int64(b.N) * chunk
				binary.Write(c, binary.LittleEndian, want)
				n, err := io.CopyBuffer(io.Discard, c, buf)
				if err != nil || n != want {
					b.Fatalf("got %d of %d bytes: %v", n, want, err)
				}
			})
		}
	}
}

// BenchmarkSimConnect opens a connection to the host echo server, sends
// one byte, reads it back and closes, one after another: conns/s.
func BenchmarkSimConnect(b *testing.B) {
	for _, how := range benchWays {
		b.Run(how, func(b *testing.B) {
			r := newSimRig(b)
			one := []byte{'x'}
			b.ResetTimer()
			for range b.N {
				c := r.dial(b, how, r.echo)
				if _, err := c.Write(one); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, one); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
		})
	}
}

// BenchmarkSimParallelConnect is BenchmarkSimConnect from 16 clients at
// once through SOCKS5.
func BenchmarkSimParallelConnect(b *testing.B) {
	r := newSimRig(b)
	b.SetParallelism(8) // × GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		one := []byte{'x'}
		for pb.Next() {
			c, err := (&proxy.Client{Proxy: r.proxy}).DialContext(context.Background(), "tcp", r.echo.String())
			if err != nil {
				b.Error(err)
				return
			}
			c.Write(one)
			if _, err := io.ReadFull(c, one); err != nil {
				b.Error(err)
			}
			c.Close()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
}

// BenchmarkScrape is one /metrics scrape of a session's sources (stack
// with link, MHI, proxy; zero values) with the go_* and process_*
// collectors, as docs/PROXY.md quotes it.
func BenchmarkScrape(b *testing.B) {
	h := metricsHandler([]metricSource{
		{name: "stack", stats: func() any { return stack.Stats{} }, kind: stackKind},
		{name: "mhi", stats: func() any { return mhi.Stats{} }, perDevice: true},
		{name: "proxy", stats: func() any { return proxy.Stats{} }, kind: proxyKind},
	})
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil))
	}
}
