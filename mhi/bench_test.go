package mhi_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// BenchmarkLoopback moves b.N transfers of each size through the emulated
// modem's LOOPBACK channel pair (UL kept busy, DL buffers re-queued from
// the completion callback) and reports throughput. The steady state
// allocates nothing, on the host or in the device. (The moderated IP_HW0
// rings need a NAPI-style poller to go fast; that is the link package's
// benchmark.)
func BenchmarkLoopback(b *testing.B) {
	for _, size := range []int{64, 1500, 16384, 32768} {
		b.Run(itoa(size), func(b *testing.B) {
			r := newRig(b, "foxconn-sdx55", sim.Options{}, mhi.Options{})
			r.powerUp()
			benchLoopback(b, r, "LOOPBACK", size)
		})
	}
}

func benchLoopback(b *testing.B, r *rig, name string, size int) {
	const bufs = 32
	var got atomic.Int64
	done := make(chan struct{}, 1)
	var target atomic.Int64
	txFree := make(chan *pci.Buffer, bufs)
	var dl *mhi.Channel
	ul, dlc, err := r.c.ChannelPair(name,
		mhi.ChannelOptions{OnComplete: func(c mhi.Completion) { txFree <- c.Buf }},
		mhi.ChannelOptions{OnComplete: func(c mhi.Completion) {
			if c.Code != mhi.CodeOverflow && got.Add(1) == target.Load() {
				done <- struct{}{}
			}
			if err := dl.Queue(c.Buf, c.Buf.Len(), mhi.EOT); err == nil {
				dl.Ring()
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	dl = dlc
	dma := r.dev.DMA()
	var rx []*pci.Buffer
	for i := 0; i < 2*bufs; i++ {
		buf, err := dma.Alloc(max(size, 2048), 64)
		if err != nil {
			b.Fatal(err)
		}
		if i < bufs {
			txFree <- buf
		} else {
			rx = append(rx, buf)
		}
	}
	ctx := context.Background()
	if err := ul.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if err := dl.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for _, buf := range rx[:min(len(rx), dl.FreeCount())] {
		if err := dl.Queue(buf, buf.Len(), mhi.EOT); err != nil {
			b.Fatal(err)
		}
	}
	dl.Ring()
	// Warm up: one round trip outside the timer.
	target.Store(1)
	send(b, ul, txFree, size, 1)
	<-done

	b.SetBytes(int64(size))
	b.ReportAllocs()
	got.Store(0)
	target.Store(int64(b.N))
	start := time.Now()
	b.ResetTimer()
	send(b, ul, txFree, size, b.N)
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("only %d of %d transfers came back", got.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pkts/s")
}

// send queues n transfers, ringing once per batch of what was free.
func send(b *testing.B, ul *mhi.Channel, txFree chan *pci.Buffer, size, n int) {
	for sent := 0; sent < n; {
		buf := <-txFree
		for {
			err := ul.Queue(buf, size, mhi.EOT)
			if err == nil {
				break
			}
			ul.Ring()
			time.Sleep(10 * time.Microsecond)
		}
		sent++
		if len(txFree) == 0 || sent == n {
			ul.Ring()
		}
	}
}

// BenchmarkHostTRECycle times the host's own work per TRE: queue it, ring,
// then consume a completion event for it (posted into an event ring the
// emulated modem leaves idle) through EventRing.Poll. Device time is
// excluded; this is the engine's per-packet cost.
func BenchmarkHostTRECycle(b *testing.B) {
	r := newRig(b, "qcom-sdx55m", sim.Options{}, mhi.Options{})
	r.powerUp()
	// IP_HW0 DL (101) completes on dedicated ring 5; with no function
	// behind IP_HW0 the device never posts there.
	dl, err := r.c.Channel(101, mhi.ChannelOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if err := dl.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	er := dl.EventRing()
	er.SetNotify(func() {})
	buf, _ := r.dev.DMA().Alloc(2048, 64)
	var completed int
	fn := func(c mhi.Completion) { completed += c.Len }
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := dl.Queue(buf, 1500, mhi.EOT); err != nil {
			b.Fatal(err)
		}
		dl.Ring()
		mhi.PostEventForTest(r.c, er.Index(), mhi.TxEvent(mhi.TREAddrForTest(dl), 1500, mhi.CodeEOT, 101))
		if er.Poll(64, fn) != 1 {
			b.Fatal("completion not consumed")
		}
	}
	b.StopTimer()
	if completed != 1500*b.N {
		b.Fatalf("completed %d bytes, want %d", completed, 1500*b.N)
	}
}

func itoa(v int) string {
	s := ""
	for {
		s = string(rune('0'+v%10)) + s
		v /= 10
		if v == 0 {
			return s
		}
	}
}
