package reliability

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	soakDuration = flag.Duration("soak.duration", 0, "run TestSoak this long (hack/soak.sh: 10m); 0 skips it")
	soakEvery    = flag.Duration("soak.every", 30*time.Second, "TestSoak's sampling interval")
	soakRate     = flag.Int("soak.rate", 200, "TestSoak's transfers (connections) per second at most")
)

// TestSoak (not in CI: hack/soak.sh) keeps the proxy
// busy for -soak.duration with 16 workers, together at most -soak.rate
// transfers a second, each a proxied connection through the modem that
// moves 256 KiB one way or the other
// (SOCKS5 down, HTTP CONNECT up, SHA-256 checked), and samples the heap and
// goroutine count every -soak.every. It prints the samples as a table;
// it fails on a failed transfer, or when the goroutines do not come back
// to their count before the load.
func TestSoak(t *testing.T) {
	if *soakDuration <= 0 {
		t.Skip("set -soak.duration (hack/soak.sh)")
	}
	srv := newStreamServer(t, nil)
	p := openPipeline(t, nil)
	base := runtime.NumGoroutine()
	end := time.Now().Add(*soakDuration)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()

	// Paced: every transfer is a connection through the carrier to the
	// host, whose host-side 4-tuple then sits in the host kernel's
	// TIME-WAIT for 60 s; unpaced (about 400/s here) the soak ran the
	// host out of ephemeral ports (28,232 on Linux by default) and the
	// carrier's dial was refused.
	pace := time.NewTicker(time.Second / time.Duration(*soakRate))
	defer pace.Stop()
	var conns, bytes, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				select {
				case <-pace.C:
				case <-ctx.Done():
					return
				}
				s := &stream{n: 256 << 10, seed: uint64(w<<32 | i)}
				var err error
				if (w+i)%2 == 0 {
					c, derr := p.dialSOCKS(ctx, srv.addr())
					if err = derr; err == nil {
						err = download(c, s)
						c.Close()
					}
				} else {
					c, derr := p.dialHTTP(ctx, srv.addr())
					if err = derr; err == nil {
						err = upload(c, s, nil)
						c.Close()
					}
				}
				if err != nil {
					// At the end, sockets see the deadline before
					// the context's timer has run.
					if ctx.Err() != nil || time.Now().After(end) {
						return
					}
					failed.Add(1)
					t.Errorf("worker %d, transfer %d: %v", w, i, err)
					continue
				}
				conns.Add(1)
				bytes.Add(s.n)
			}
		})
	}

	var tab strings.Builder
	fmt.Fprintf(&tab, "\n| t | connections | MiB moved | heap in use (MiB) | live heap after GC (MiB) | goroutines |\n|---|---|---|---|---|---|\n")
	sample := func(at time.Duration) {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		inuse := m.HeapInuse
		// The live heap is what a leak grows; in-use heap swings with
		// the GC cycle.
		runtime.GC()
		runtime.ReadMemStats(&m)
		line := fmt.Sprintf("| %v | %d | %d | %.1f | %.1f | %d |\n", at.Round(time.Second), conns.Load(), bytes.Load()>>20,
			float64(inuse)/(1<<20), float64(m.HeapAlloc)/(1<<20), runtime.NumGoroutine())
		tab.WriteString(line)
		t.Log(strings.TrimSpace(line))
	}
	start := time.Now()
	tick := time.NewTicker(*soakEvery)
	sample(0)
	for ctx.Err() == nil {
		select {
		case <-tick.C:
			sample(time.Since(start))
		case <-ctx.Done():
		}
	}
	tick.Stop()
	wg.Wait()
	sample(time.Since(start))
	t.Log(tab.String())
	if !settle(30*time.Second, func() bool { return runtime.NumGoroutine() <= base }) {
		t.Errorf("%d goroutines after the load, %d before", runtime.NumGoroutine(), base)
	}
	t.Logf("%d transfers, %d MiB, %d failed", conns.Load(), bytes.Load()>>20, failed.Load())
}
