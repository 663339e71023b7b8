package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// radioChildArg starts the bench as table 10's Linux TCP endpoint inside
// one of tunPair's namespaces (`ip netns exec NS bench -radio-child …`):
// it listens or dials, sends or receives one stream with the congestion
// control asked for, and the receiver prints a childResult as JSON.
const radioChildArg = "-radio-child"

// binEvery is the width of the goodput-over-time bins.
const binEvery = 100 * time.Millisecond

// childResult is what a radio child prints.
type childResult struct {
	Mbps  float64   `json:"mbps,omitempty"`  // over the window, receiver only
	Bins  []float64 `json:"bins,omitempty"`  // Mbit/s per binEvery from the connection's start
	Pings []float64 `json:"pings,omitempty"` // ms, sender with -ping only
}

// radioChild is the child's main.
func radioChild(args []string) {
	fs := flag.NewFlagSet("radio-child", flag.ExitOnError)
	listen := fs.String("listen", "", "listen on this address and take one connection")
	dial := fs.String("dial", "", "dial this address")
	cc := fs.String("cc", "cubic", "TCP_CONGESTION of the socket")
	send := fs.Bool("send", false, "send (else receive and measure)")
	warm := fs.Duration("warm", 2*time.Second, "receiver: warm-up before the window")
	dur := fs.Duration("dur", 5*time.Second, "receiver: measurement window")
	ping := fs.String("ping", "", "sender: ping this address every 100 ms while sending")
	fs.Parse(args)
	if err := radioChildRun(*listen, *dial, *cc, *send, *warm, *dur, *ping); err != nil {
		fmt.Fprintln(os.Stderr, "radio-child:", err)
		os.Exit(1)
	}
}

func radioChildRun(listen, dial, cc string, send bool, warm, dur time.Duration, ping string) error {
	setCC := func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("TCP_CONGESTION %s: %w", cc, serr)
		}
		return nil
	}
	var c net.Conn
	if listen != "" {
		lc := net.ListenConfig{Control: setCC}
		l, err := lc.Listen(context.Background(), "tcp4", listen)
		if err != nil {
			return err
		}
		fmt.Println("ready")
		l.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
		c, err = l.Accept()
		l.Close()
		if err != nil {
			return err
		}
	} else {
		d := net.Dialer{Control: setCC, Timeout: 10 * time.Second}
		var err error
		if c, err = d.Dial("tcp4", dial); err != nil {
			return err
		}
	}
	defer c.Close()
	// A sender whose receiver vanished (the bench killed, the namespaces
	// gone) would otherwise block in Write for TCP's whole retry time.
	c.SetDeadline(time.Now().Add(warm + dur + 20*time.Second))
	var res childResult
	if send {
		var stop atomic.Bool
		pings := startPinger(ping)
		pour(c, &stop) // until the receiver closes
		res.Pings = pings()
		if len(res.Pings) == 0 {
			return nil
		}
	} else {
		var got atomic.Uint64
		go drain(c, &got)
		res.Mbps, res.Bins = measureBins(&got, warm, dur)
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// measureBins samples got every binEvery for w+d: the Mbit/s of the
// window d after w, and of every bin.
func measureBins(got *atomic.Uint64, w, d time.Duration) (float64, []float64) {
	t := time.NewTicker(binEvery)
	defer t.Stop()
	start := time.Now()
	var bins []float64
	var b0, last uint64
	var t0 time.Time
	for end := start.Add(w + d); ; {
		now := <-t.C
		n := got.Load()
		bins = append(bins, float64(n-last)*8/binEvery.Seconds()/1e6)
		last = n
		if t0.IsZero() && now.Sub(start) >= w {
			b0, t0 = n, now
		}
		if !now.Before(end) {
			return float64(n-b0) * 8 / now.Sub(t0).Seconds() / 1e6, bins
		}
	}
}

// startPinger sends an ICMP echo to dst every 100 ms until the returned
// function is called, which returns the round trips answered (ms). A ping
// lost to a full queue or a gap is not counted. dst "" pings nothing.
func startPinger(dst string) func() []float64 {
	if dst == "" {
		return func() []float64 { return nil }
	}
	pc, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "radio-child: ping:", err)
		return func() []float64 { return nil }
	}
	to := &net.IPAddr{IP: net.ParseIP(dst)}
	id := os.Getpid() & 0xffff
	var mu sync.Mutex
	sent := map[int]time.Time{}
	var rtts []float64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
				continue
			}
			e, ok := m.Body.(*icmp.Echo)
			if !ok || e.ID != id {
				continue
			}
			mu.Lock()
			if t, ok := sent[e.Seq]; ok {
				rtts = append(rtts, float64(time.Since(t))/1e6)
				delete(sent, e.Seq)
			}
			mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for seq := 0; ; seq = (seq + 1) & 0xffff {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			b, _ := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: make([]byte, 56)}}).Marshal(nil)
			mu.Lock()
			sent[seq] = time.Now()
			mu.Unlock()
			pc.WriteTo(b, to)
		}
	}()
	return func() []float64 {
		close(stop)
		pc.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return rtts
	}
}

// linuxStream runs one Linux TCP stream across p with congestion control
// cc: down sends from the network's namespace to the device's, else the
// other way; an upload pings the network's side from the device's
// meanwhile. It returns the receiver's result merged with the sender's
// pings.
func linuxStream(p *tunPair, cc string, down bool, w, d time.Duration) (childResult, error) {
	bin, err := os.Executable()
	if err != nil {
		return childResult{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), w+d+30*time.Second)
	defer cancel()
	addr := p.addr[netSide] + ":5201"
	common := []string{"-cc", cc, "-warm", w.String(), "-dur", d.String()}
	srvArgs := append([]string{"-listen", addr}, common...)
	cliArgs := append([]string{"-dial", addr}, common...)
	if down {
		srvArgs = append(srvArgs, "-send")
	} else {
		cliArgs = append(cliArgs, "-send", "-ping", p.addr[netSide])
	}
	child := func(ns string, args []string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, bin, radioChildArg}, args...)...)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // ip execs the helper, which keeps it
		return cmd
	}
	srv := child(p.ns[netSide], srvArgs)
	out, err := srv.StdoutPipe()
	if err != nil {
		return childResult{}, err
	}
	if err := srv.Start(); err != nil {
		return childResult{}, err
	}
	var srvOut strings.Builder
	ready := make(chan bool, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		signalled := false
		for {
			n, err := out.Read(buf)
			srvOut.Write(buf[:n])
			if !signalled && strings.Contains(srvOut.String(), "ready\n") {
				ready <- true
				signalled = true
			}
			if err != nil {
				if !signalled {
					ready <- false
				}
				return
			}
		}
	}()
	if !<-ready {
		<-copied
		srv.Wait()
		return childResult{}, fmt.Errorf("the server in %s did not start", p.ns[netSide])
	}
	cliOut, cerr := child(p.ns[devSide], cliArgs).Output()
	<-copied
	serr := srv.Wait()
	if cerr != nil || serr != nil {
		return childResult{}, fmt.Errorf("linux %s: client: %v, server: %v", cc, cerr, serr)
	}
	var res childResult
	for _, text := range []string{strings.TrimPrefix(srvOut.String(), "ready\n"), string(cliOut)} {
		if strings.TrimSpace(text) == "" {
			continue
		}
		var r childResult
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			return childResult{}, fmt.Errorf("linux %s: %q: %w", cc, text, err)
		}
		if r.Bins != nil {
			res.Mbps, res.Bins = r.Mbps, r.Bins
		}
		if r.Pings != nil {
			res.Pings = r.Pings
		}
	}
	if res.Bins == nil {
		return childResult{}, fmt.Errorf("linux %s: no receiver result", cc)
	}
	return res, nil
}
