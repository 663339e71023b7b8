package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/mhi/sim"
)

// dialers is how many dials the scale table keeps in flight (package
// stack allows 256 by default).
const dialers = 64

// openConns dials n connections through e with dialers in flight and
// returns them with the peer's ends, as accepted.
func (e *altEnv) openConns(n int) (clients, peers []net.Conn, err error) {
	acc := make(chan net.Conn, n)
	go func() {
		for range n {
			c, err := e.peerTCP.Accept()
			if err != nil {
				close(acc)
				return
			}
			acc <- c
		}
		close(acc)
	}()
	clients = make([]net.Conn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				c, derr := e.dialTCP(ctx)
				if derr != nil {
					mu.Lock()
					err = derr
					mu.Unlock()
					cancel()
					return
				}
				clients[i] = c
			}
		}()
	}
	wg.Wait()
	if err == nil {
		for c := range acc {
			peers = append(peers, c)
			if len(peers) == n {
				break
			}
		}
		if len(peers) < n {
			err = fmt.Errorf("%d of %d connections accepted", len(peers), n)
		}
	}
	if err != nil {
		closeAll(clients)
		closeAll(peers)
		return nil, nil, err
	}
	return clients, peers, nil
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

// manyStreams opens n connections through the modem, each writing 16 KiB
// chunks to its host socket, and measures the aggregate for the window d
// after warm-up w; the process's peak RSS is reset before the stack is
// built.
func manyStreams(n int, d, w time.Duration, linger0 bool) (sample, error) {
	resetPeakRSS()
	e, err := mhistackEnv(sim.Options{})
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	clients, peers, err := e.openConns(n)
	if err != nil {
		e.close()
		return nil, err
	}
	open := time.Since(t0)
	got := make([]atomic.Uint64, n)
	var total atomic.Uint64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16<<10)
			for !stop.Load() {
				if _, err := clients[i].Write(buf); err != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 16<<10)
			for {
				k, err := peers[i].Read(buf)
				got[i].Add(uint64(k))
				total.Add(uint64(k))
				if err != nil {
					return
				}
			}
		}()
	}
	r0 := e.stats()
	s, _ := e.window(d, w, &total)
	r1 := e.stats()
	s["retrans_s"] = float64(r1.TCPRetransmits-r0.TCPRetransmits) / d.Seconds()
	s["refused_s"] = float64(r1.TXDroppedNoBufferSpace-r0.TXDroppedNoBufferSpace) / d.Seconds()
	// Fairness over the window is approximated by the whole run's bytes
	// per stream (the warm-up is a third of the window).
	var sum, sq float64
	for i := range got {
		x := float64(got[i].Load())
		sum += x
		sq += x * x
	}
	s["jain"] = sum * sum / (float64(n) * sq)
	s["open_s"] = open.Seconds()
	s["peak_rss_mib"] = float64(procStatusKB("VmHWM")) / 1024
	stop.Store(true)
	// A graceful close, the busy send buffers still full: Stack.Close
	// then aborts each connection with an RST, which goes through the
	// stack's transmit queue (before it, each RST waited in the link
	// for the full UL ring: 11–30 s for 1,000 connections; -linger0
	// closes abortively instead).
	if linger0 {
		for _, c := range clients {
			if l, ok := c.(interface{ SetLinger(int) error }); ok {
				l.SetLinger(0)
			}
		}
	}
	closeAll(clients)
	closeAll(peers)
	wg.Wait()
	tc := time.Now()
	if err := e.close(); err != nil {
		return nil, err
	}
	s["close_s"] = time.Since(tc).Seconds()
	return s, nil
}

// idleConns opens n connections through e and leaves them idle: the
// growth of Go's heap and stacks, of RSS and of goroutines, per
// connection.
func idleConns(e *altEnv, n int) (sample, error) {
	defer e.close()
	before := memNow()
	clients, peers, err := e.openConns(n)
	if err != nil {
		return nil, err
	}
	time.Sleep(100 * time.Millisecond) // handshakes' last ACKs, relays started
	after := memNow()
	closeAll(clients)
	closeAll(peers)
	f := float64(n)
	return sample{
		"heap_kib":   float64(after.heap-before.heap) / 1024 / f,
		"goroutines": float64(after.goroutines-before.goroutines) / f,
	}, nil
}

type memSnap struct {
	heap       int64 // Go heap in use plus goroutine stacks, bytes
	goroutines int
}

func memNow() memSnap {
	// Twice: what sync.Pools (gVisor's buffers among them) held from an
	// earlier run survives one GC in their victim caches.
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memSnap{heap: int64(m.HeapAlloc + m.StackInuse), goroutines: runtime.NumGoroutine()}
}

// connRate dials and closes connections through the modem with dialers
// goroutines for the window d after warm-up w: connections/s and the
// dial's p50 and p99 (SYN to established, through the carrier network,
// which connects to the host's listener before it answers).
func connRate(workers int, d, w time.Duration) (sample, error) {
	e, err := mhistackEnv(sim.Options{})
	if err != nil {
		return nil, err
	}
	defer e.close()
	go func() {
		for {
			c, err := e.peerTCP.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	var done atomic.Uint64
	var measuring, stop atomic.Bool
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error // under mu
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for !stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				t := time.Now()
				c, err := e.dialTCP(ctx)
				cancel()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if measuring.Load() {
					mine = append(mine, time.Since(t))
				}
				c.Close()
				done.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	time.Sleep(w)
	measuring.Store(true)
	n0, t0 := done.Load(), time.Now()
	time.Sleep(d)
	n1, t1 := done.Load(), time.Now()
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	s := sample{"conns_s": float64(n1-n0) / t1.Sub(t0).Seconds()}
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))]) / 1e6 }
		s["p50_ms"], s["p99_ms"] = q(0.5), q(0.99)
	}
	return s, nil
}

// resetPeakRSS resets the process's VmHWM to its current RSS (Linux ≥
// 4.0: clear_refs 5).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// procStatusKB reads a "kB" field of /proc/self/status.
func procStatusKB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == field {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// scaleTable is table 7: many streams, idle connections, connection
// rate, through package stack on the emulated modem.
func (c *config) scaleTable() (*table, error) {
	streams, idle := 1000, 1000
	if c.quick {
		streams, idle = 50, 50
	}
	const rateWorkers = 8
	names := []string{
		fmt.Sprintf("%d streams", streams),
		fmt.Sprintf("%d idle connections through the modem", idle),
		fmt.Sprintf("%d idle connections, channel pair", idle),
		"connections/s",
	}
	res, err := c.runAll(names, func(i int) (sample, error) {
		switch i {
		case 0:
			return manyStreams(streams, c.dur, c.warm, c.linger0)
		case 1:
			e, err := mhistackEnv(sim.Options{})
			if err != nil {
				return nil, err
			}
			return idleConns(e, idle)
		case 2:
			e, err := channelPairEnv()
			if err != nil {
				return nil, err
			}
			return idleConns(e, idle)
		default:
			return connRate(rateWorkers, c.dur, c.warm)
		}
	})
	if err != nil {
		return nil, err
	}
	st, im, ic, cr := res[0], res[1], res[2], res[3]
	t := &table{
		title: "7. Scale: many streams, idle connections, connection rate",
		intro: fmt.Sprintf("Through package `stack` on the emulated modem (`stack.Open`, defaults, the carrier network "+
			"behind the modem, host sockets on 127.0.0.1 as the peers, as in table 5). **Streams**: %d TCP connections "+
			"opened with %d dials in flight, each writing 16 KiB chunks as fast as it can; aggregate Mbit/s of payload "+
			"received by the host sockets, Jain's fairness index over the streams' bytes (1 = equal shares), and the "+
			"process's peak RSS (VmHWM, reset before the stack is built). **Idle**: %d connections opened and left idle; "+
			"growth per connection of Go's heap and goroutine stacks (after a GC) and of goroutines (RSS is not reported: the runtime returns and reuses pages between runs, so its growth is noise at this size). Everything "+
			"runs in this process, so through the modem a connection costs both its ends: the stack's endpoint and the "+
			"carrier network's endpoint with its relay goroutines and kernel socket pair; the channel-pair row (two "+
			"package-`stack` stacks, table 5) costs two stack endpoints and nothing else. **Connections/s**: %d "+
			"goroutines each dialing and closing in a loop; the carrier network connects to the host's listener before it "+
			"completes the handshake, so a dial is a round trip through the modem and a kernel connect.",
			streams, dialers, idle, rateWorkers),
		header: []string{"measurement", "metric", "median (min–max)"},
	}
	sn := fmt.Sprintf("%d concurrent streams (the stack sends)", streams)
	closeRow := "Stack.Close right after closing them (graceful close, send buffers full), s"
	if c.linger0 {
		closeRow = "Stack.Close right after closing them with linger 0, s"
	}
	in := fmt.Sprintf("%d idle connections through the modem", idle)
	t.rows = [][]string{
		{sn, "aggregate Mbit/s", st.medRange("mbps", 0)},
		{"", "Jain's fairness index", st.medRange("jain", 3)},
		{"", fmt.Sprintf("time to open the %d connections, s", streams), st.medRange("open_s", 2)},
		{"", "peak RSS of the process, MiB", st.medRange("peak_rss_mib", 0)},
		{"", closeRow, st.medRange("close_s", 2)},
		{"", "process CPU, ms/s", st.medRange("proc_ms", 0)},
		{"", "TCP retransmits/s (the stack's)", st.medRange("retrans_s", 0)},
		{"", "packets/s dropped (TX queue full, or refused by the link without one)", st.medRange("refused_s", 0)},
		{in, "Go heap + stacks per connection, KiB", im.medRange("heap_kib", 1)},
		{"", "goroutines per connection", im.medRange("goroutines", 1)},
		{fmt.Sprintf("%d idle connections, channel.Endpoint pair", idle), "Go heap + stacks per connection (two stack endpoints), KiB", ic.medRange("heap_kib", 1)},
		{"", "goroutines per connection", ic.medRange("goroutines", 1)},
		{fmt.Sprintf("connections/s (%d dialers, dial + close)", rateWorkers), "connections/s", cr.medRange("conns_s", 0)},
		{"", "dial p50 ms", cr.medRange("p50_ms", 2)},
		{"", "dial p99 ms", cr.medRange("p99_ms", 2)},
	}
	t.notes = append(t.notes, fmt.Sprintf("Opening %d connections with %d dials in flight took %.2f s at the median: %.0f "+
		"connections/s under concurrency, against %.0f/s for %d dialers in a dial-and-close loop.",
		streams, dialers, st.med("open_s"), float64(streams)/st.med("open_s"), cr.med("conns_s"), rateWorkers))
	streamsNote := fmt.Sprintf("%d streams share %.0f Mbit/s (median; runs %.0f–%.0f) with a fairness index of %.2f; "+
		"meanwhile the stack retransmits %.0f segments/s ", streams, st.med("mbps"), minOf(st.values("mbps")),
		maxOf(st.values("mbps")), st.med("jain"), st.med("retrans_s"))
	if st.med("refused_s") > 0 {
		streamsNote += fmt.Sprintf("and %.0f packets/s are dropped for a full transmit queue (package stack's "+
			"Config.TXQueueLen; TCP retransmits them). ", st.med("refused_s"))
	} else {
		streamsNote += "while nothing is dropped before the link, so those are losses or timeouts past it (the modem's DL queue, " +
			"the carrier network) or spurious. "
	}
	streamsNote += fmt.Sprintf("Peak RSS: %.0f MiB; for scale, %d connections × package stack's default send buffer "+
		"(1 MiB, growing to 6 MiB) is %d MiB, and the carrier network's receive side is in the same process.",
		st.med("peak_rss_mib"), streams, streams)
	t.notes = append(t.notes, streamsNote)
	t.notes = append(t.notes, fmt.Sprintf("Per idle connection the stack's own share is about half of the channel-pair row "+
		"(two stack endpoints): %.1f KiB; the rest of the %.1f KiB through the modem is the carrier network's side "+
		"(its endpoint, relay goroutines, buffers), which a real modem does not put in the host's memory.",
		ic.med("heap_kib")/2, im.med("heap_kib")))
	return t, nil
}
