package reliability

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sysErrFaults is how many SYS_ERRs TestSysErrTCPResumesBothWays injects:
// enough that the stall it guards against (in about one fault in four
// before the fix) shows up in nearly every run.
const sysErrFaults = 10

// maxRTOsPerSysErr bounds the retransmission timeouts one TCP sender may
// take to resume after one SYS_ERR.
const maxRTOsPerSysErr = 5

// TestSysErrTCPResumesBothWays is the stall after SYS_ERR in isolation:
// one TCP stream down (carrier network → host) and one up, both at full
// speed through the emulated modem, and a SYS_ERR mid-transfer, ten
// times. A SYS_ERR loses what was in flight in both directions, so each
// TCP sender needs at most a retransmission timeout or two to repair its
// window; the test counts them, per fault and per sender, rather than
// trusting wall time on a loaded machine.
//
// Before the fix, the carrier network's TCP (gVisor with RACK on) sat in
// SACK recovery after about one fault in four, repairing the lost window
// one or two segments per RTO: 13-30 RTOs and 2–60 s per fault
// (docs/RELIABILITY.md, "The stall after SYS_ERR").
func TestSysErrTCPResumesBothWays(t *testing.T) {
	if testing.Short() {
		t.Skip("moves data through the whole pipeline")
	}
	var (
		downBytes, upBytes atomic.Int64
		blob               = []byte(strings.Repeat("mhistack SYS_ERR resume ", 2731)) // 64 KiB-ish
	)
	srv := newHostServer(t, func(c net.Conn) {
		var mode [1]byte
		if _, err := io.ReadFull(c, mode[:]); err != nil {
			return
		}
		switch mode[0] {
		case 'D': // the host sends until the client closes
			for {
				if _, err := c.Write(blob); err != nil {
					return
				}
			}
		case 'U':
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				upBytes.Add(int64(n))
				if err != nil {
					return
				}
			}
		}
	})
	p := openPipeline(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := p.st.DialContext(ctx, "tcp4", srv.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	uc, err := p.st.DialContext(ctx, "tcp4", srv.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		if _, err := dc.Write([]byte{'D'}); err != nil {
			return
		}
		buf := make([]byte, 64<<10)
		for {
			n, err := dc.Read(buf)
			downBytes.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	go func() {
		if _, err := uc.Write([]byte{'U'}); err != nil {
			return
		}
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := uc.Write(blob); err != nil {
				return
			}
		}
	}()

	const step = 256 << 10
	// waitBoth waits until both streams have moved another n bytes from
	// (d0, u0) and returns when each got there; 60 s without it fails.
	waitBoth := func(what string, d0, u0, n int64) (dAt, uAt time.Duration) {
		t0 := time.Now()
		for dAt == 0 || uAt == 0 {
			if dAt == 0 && downBytes.Load() >= d0+n {
				dAt = time.Since(t0)
			}
			if uAt == 0 && upBytes.Load() >= u0+n {
				uAt = time.Since(t0)
			}
			if time.Since(t0) > 60*time.Second {
				t.Fatalf("%s: no resume within 60 s: down +%d, up +%d bytes", what, downBytes.Load()-d0, upBytes.Load()-u0)
			}
			time.Sleep(200 * time.Microsecond)
		}
		return dAt, uAt
	}
	waitBoth("start", 0, 0, 4*step)

	var tab strings.Builder
	fmt.Fprintf(&tab, "\n| SYS_ERR | MHI recovery | down resumed | up resumed | carrier TCP (sends down) | stack TCP (sends up) |\n|---|---|---|---|---|---|\n")
	var worst time.Duration
	var maxRTO uint64
	for k := 1; k <= sysErrFaults; k++ {
		// Both streams at full speed again after the last fault.
		waitBoth(fmt.Sprintf("before SYS_ERR #%d", k), downBytes.Load(), upBytes.Load(), 4*step)
		cBefore, sBefore := tcpCountersOf(p.carrier.GVisor()), tcpCountersOf(p.st.GVisor())
		mhiRecovery := sysErrRecovered(t, p, k)
		dAt, uAt := waitBoth(fmt.Sprintf("after SYS_ERR #%d", k), downBytes.Load(), upBytes.Load(), step)
		c, s := tcpCountersOf(p.carrier.GVisor()).Sub(cBefore), tcpCountersOf(p.st.GVisor()).Sub(sBefore)
		fmt.Fprintf(&tab, "| #%d | %v | %v | %v | %v | %v |\n", k, mhiRecovery.Round(100*time.Microsecond),
			dAt.Round(time.Millisecond), uAt.Round(time.Millisecond), c, s)
		worst = max(worst, dAt, uAt)
		maxRTO = max(maxRTO, c.Timeouts, s.Timeouts)
		// The bound: a lost window costs a sender a timeout, and a
		// few more on a loaded machine if retransmissions are lost too
		// (they may leave before the channels are back). Repairing a
		// window one RTO at a time took 13-30.
		if c.Timeouts > maxRTOsPerSysErr || s.Timeouts > maxRTOsPerSysErr {
			t.Errorf("SYS_ERR #%d: the carrier's TCP took %d retransmission timeouts and the stack's %d to resume (down after %v, up after %v); want at most %d each",
				k, c.Timeouts, s.Timeouts, dAt.Round(time.Millisecond), uAt.Round(time.Millisecond), maxRTOsPerSysErr)
		}
	}
	t.Log(tab.String())
	t.Logf("worst resume %v; most RTOs one sender took for one SYS_ERR: %d", worst.Round(time.Millisecond), maxRTO)
}

// sysErrRecovered injects SYS_ERR #k and waits for the controller's
// EventRecovered (30 s bound); it returns how long recovery took.
func sysErrRecovered(t *testing.T, p *pipeline, k int) time.Duration {
	t.Helper()
	recovered, unsub := onRecovered(p.ctrl)
	defer unsub()
	t0 := time.Now()
	if err := p.modem.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-recovered:
	case <-time.After(30 * time.Second):
		t.Fatalf("SYS_ERR #%d: no recovery within 30 s", k)
	}
	return time.Since(t0)
}
