package link_test

import (
	"context"
	"crypto/sha256"
	"flag"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// stormBytes sizes the fault-storm transfer. CI runs the reduced size; the
// full storm (1 GiB through the proxy, ten SYS_ERRs, a data
// session detach) is a separate, later test.
var stormBytes = flag.Int("faultstorm.bytes", 8<<20, "least bytes moved by TestFaultStormDuringTCPTransfer (it streams until every fault is done)")

// TestFaultStormDuringTCPTransfer (the fault storm, reduced to the link
// level): a gVisor TCP connection runs through the endpoint and the
// emulated modem's loopback while the test injects, one after another,
// three SYS_ERRs, a burst of lost MSIs, a slow device and RX buffer
// starvation. TCP retransmits cover what each fault loses; the transfer
// must complete with a matching SHA-256. For every fault the test
// measures the recovery time: from the end of the fault to the moment the
// receiver has taken another 256 KiB.
func TestFaultStormDuringTCPTransfer(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, noAttach: true})
	s, a, b := twoAddressStack(t, r.ep)
	defer s.Destroy()
	l, err := gonet.ListenTCP(s, tcpip.FullAddress{NIC: 1, Addr: b, Port: 8080}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	// The receiver hashes as it reads and publishes its progress, which
	// is what recovery is measured against.
	var received atomic.Int64
	type result struct {
		sum [32]byte
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		h := sha256.New()
		buf := make([]byte, 64<<10)
		var n int64
		for {
			k, err := c.Read(buf)
			h.Write(buf[:k])
			n += int64(k)
			received.Store(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				done <- result{n: n, err: err}
				return
			}
		}
		var sum [32]byte
		h.Sum(sum[:0])
		done <- result{sum: sum, n: n}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := gonet.DialTCPWithBind(ctx, s, tcpip.FullAddress{NIC: 1, Addr: a}, tcpip.FullAddress{NIC: 1, Addr: b, Port: 8080}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("dial over the modem: %v", err)
	}
	// The sender streams pseudo-random data, hashing it, until the last
	// fault has been injected and recovered from and at least
	// -faultstorm.bytes have gone: however fast the link, every fault
	// lands mid-stream.
	type sent struct {
		sum [32]byte
		n   int64
		err error
	}
	stop := make(chan struct{})
	writeDone := make(chan sent, 1)
	start := time.Now()
	go func() {
		rng := rand.New(rand.NewPCG(12, 12))
		h := sha256.New()
		buf := make([]byte, 256<<10)
		var n int64
		var err error
		for err == nil {
			select {
			case <-stop:
				if n >= int64(*stormBytes) {
					c.Close()
					var sum [32]byte
					h.Sum(sum[:0])
					writeDone <- sent{sum, n, nil}
					return
				}
			default:
			}
			for i := range buf {
				buf[i] = byte(rng.Uint32())
			}
			h.Write(buf)
			_, err = c.Write(buf)
			n += int64(len(buf))
		}
		c.Close()
		writeDone <- sent{n: n, err: err}
	}()

	// progress waits until the receiver has taken n more bytes than at
	// the call (or the transfer ended) and returns how long that took.
	progress := func(n int64) time.Duration {
		from, t0 := received.Load(), time.Now()
		for received.Load() < from+n {
			if time.Since(t0) > 30*time.Second {
				t.Fatalf("no progress for 30 s after a fault (received %d)", received.Load())
			}
			time.Sleep(200 * time.Microsecond)
		}
		return time.Since(t0)
	}
	const step = 256 << 10
	type fault struct {
		name   string
		inject func() // returns when the fault is over
	}
	faults := []fault{
		{"SYS_ERR #1", func() { sysErr(t, r) }},
		{"MSI loss burst (all vectors, 100 ms)", func() {
			r.dev.SetMSIFilter(func(int) (bool, time.Duration) { return true, 0 })
			time.Sleep(100 * time.Millisecond)
			r.dev.SetMSIFilter(nil)
		}},
		{"SYS_ERR #2", func() { sysErr(t, r) }},
		{"slow device (1 ms per TRE and event, 300 ms)", func() {
			r.m.SetSlow(time.Millisecond)
			time.Sleep(300 * time.Millisecond)
			r.m.SetSlow(0)
		}},
		{"RX buffer starvation (200 ms)", func() {
			release := r.ep.StarveRX()
			time.Sleep(200 * time.Millisecond)
			release()
		}},
		{"SYS_ERR #3", func() { sysErr(t, r) }},
	}
	progress(step) // the stream is running
	for _, f := range faults {
		t0 := time.Now()
		f.inject()
		held := time.Since(t0)
		rec := progress(step)
		t.Logf("%-46s fault %8v  recovery (next 256 KiB) %v", f.name, held.Round(100*time.Microsecond), rec.Round(100*time.Microsecond))
	}

	close(stop)
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatalf("transfer did not finish: received %d", received.Load())
	}
	snd := <-writeDone
	if snd.err != nil {
		t.Fatalf("sender after %d bytes: %v", snd.n, snd.err)
	}
	if res.err != nil {
		t.Fatalf("receiver after %d bytes: %v", res.n, res.err)
	}
	el := time.Since(start)
	if res.n != snd.n || res.sum != snd.sum {
		t.Fatalf("received %d bytes with SHA-256 %x, sent %d with %x", res.n, res.sum[:8], snd.n, snd.sum[:8])
	}
	want := snd.sum
	st := r.ep.Stats()
	cs := r.c.Stats()
	t.Logf("%d MiB in %v with %d faults, SHA-256 %x… matches; controller: %d SYS_ERRs, %d recoveries; link: missed MSIs caught %d, RX alloc fails %d, TX drops %+v, RX drops truncated %d",
		snd.n>>20, el.Round(time.Millisecond), len(faults), want[:6], cs.SysErrs, cs.Recoveries, st.MissedInterrupts, st.RXAllocFail, st.TXDrops, st.RXDrops.Truncated)
	if cs.SysErrs != 3 || cs.Recoveries != 3 {
		t.Errorf("controller saw %d SYS_ERRs and %d recoveries, want 3 and 3", cs.SysErrs, cs.Recoveries)
	}
}

// sysErr crashes the modem and waits until the controller has recovered
// and the link runs again.
func sysErr(t *testing.T, r *rig) {
	t.Helper()
	recovered := make(chan struct{}, 1)
	unsub := r.c.Subscribe(func(e mhi.Event) {
		if e.Kind == mhi.EventRecovered {
			select {
			case recovered <- struct{}{}:
			default:
			}
		}
	})
	defer unsub()
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-recovered:
	case <-time.After(10 * time.Second):
		t.Fatal("no recovery within 10 s of SYS_ERR")
	}
}
