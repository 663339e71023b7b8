package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/link/simnet"
	mstack "github.com/mhistack/mhistack/stack"
)

// radioUDPTable (10b) sends unpaced UDP up over every radio preset:
// mhistack through the emulated modem and its carrier network, Linux
// between table 10's two namespaces through the same model; both count
// the drops of each stage a datagram crosses (udpStages).
func (c *config) radioUDPTable() (*table, error) {
	names, cfgs, err := radioPresets(c.quick)
	if err != nil {
		return nil, err
	}
	d, w := radioWindows(c)
	root := os.Geteuid() == 0
	res, err := c.runAll(names, func(i int) (sample, error) { return radioUDPRun(cfgs[i], d, w, root) })
	if err != nil {
		return nil, err
	}
	stageNames := strings.Join(append(udpStages[:], "elsewhere"), " / ")
	t := &table{
		title: "10b. Radio presets: unpaced UDP up through the emulated modem's radio model, against Linux on the same model",
		intro: "One writer per preset sends 1400-byte IP datagrams up as fast as writes return, measured for " +
			fmt.Sprintf("%v after %v, each through a new instance of the model: ", d, w) +
			"mhistack is stack.Open on the emulated modem (qcom-sdx55m, raw IP) with the preset on its carrier network, " +
			"the peer a host socket; Linux sends from table 10's device namespace to its network namespace across the TUN " +
			"relay and the same model (needs root). Delivered: Mbit/s of payload read by the peer over the window, and its " +
			"share of the preset's uplink rate (for a preset whose rate follows a trace: of the trace's mean rate over the window, counted from the model's start). Drops, as a share of what was sent in the window: host = the sending " +
			"stack's transmit queue beyond what writers were told of and its link (mhistack: link.TXDrops; Linux: the " +
			"device TUN's tx_dropped and UDP SndbufErrors); modem = UL transfers the emulated modem did not deliver; " +
			"radio = the model's queue, random loss and gaps; carrier = mhistack's carrier network (its stack and " +
			"its relay into a kernel socket), Linux's relay writes into the network's TUN that failed; receiver = the " +
			"receiving socket's drops (SO_MEMINFO); elsewhere = what no stage counted (datagrams in flight at the " +
			"window's edges, the network namespace's backlog). Told: writes that failed, each an error to the writer. " +
			"Median of the runs.",
		header: []string{"preset", "UL Mbit/s", "mhistack delivered", "Linux delivered", "mhistack ÷ Linux",
			"mhistack loss %", "mhistack drops % " + stageNames, "mhistack told %", "Linux loss %", "Linux drops % " + stageNames},
	}
	var worst float64 = -1
	worstName := ""
	for i, n := range names {
		s := res[i]
		up := radioWindowRate(cfgs[i].Up, w, d)
		upCell := fmt.Sprintf("%.1f", up)
		if cfgs[i].Up.Trace != nil {
			upCell = fmt.Sprintf("%.1f in the window (trace; mean %.1f)", up, float64(cfgs[i].Up.MeanRate())/1e6)
		}
		row := []string{n, upCell, fmt.Sprintf("%.1f (%.0f %%)", s.med("mh_mbps"), 100*s.med("mh_mbps")/up)}
		if len(s.values("lx_mbps")) == 0 {
			row = append(row, "needs root", "—", fmt.Sprintf("%.1f", s.med("mh_loss")), stagesCell(s, "mh_"),
				fmt.Sprintf("%.1f", s.med("mh_told")), "needs root", "needs root")
			t.rows = append(t.rows, row)
			continue
		}
		ratio := s.med("mh_mbps") / s.med("lx_mbps")
		if worst < 0 || ratio < worst {
			worst, worstName = ratio, n
		}
		row = append(row, fmt.Sprintf("%.1f (%.0f %%)", s.med("lx_mbps"), 100*s.med("lx_mbps")/up), fmt.Sprintf("%.2f", ratio),
			fmt.Sprintf("%.1f", s.med("mh_loss")), stagesCell(s, "mh_"), fmt.Sprintf("%.1f", s.med("mh_told")),
			fmt.Sprintf("%.1f", s.med("lx_loss")), stagesCell(s, "lx_"))
		t.rows = append(t.rows, row)
	}
	if worst >= 0 {
		verdict := "met on every preset"
		if worst < 0.9 {
			verdict = fmt.Sprintf("missed: %s at %.2f×", worstName, worst)
		}
		t.notes = append(t.notes, fmt.Sprintf("Target: delivered ≥ 0.9× Linux's rate on every preset: %s (lowest %.2f×, %s).",
			verdict, worst, worstName))
	} else {
		t.notes = append(t.notes, "Linux was not measured: run the bench as root (`ip netns`, TUN devices).")
	}
	return t, nil
}

// stagesCell is the medians of a system's drop shares by stage.
func stagesCell(s series, prefix string) string {
	var b strings.Builder
	for i, name := range append(udpStages[:], "elsewhere") {
		if i > 0 {
			b.WriteString(" / ")
		}
		fmt.Fprintf(&b, "%.1f", s.med(prefix+"drop_"+name))
	}
	return b.String()
}

// radioUDPRun is one run of radioUDPTable for cfg: mhistack, then Linux
// when root.
func radioUDPRun(cfg radio.Config, d, w time.Duration, root bool) (sample, error) {
	smp := sample{}
	add := func(prefix string, s sample) {
		for k, v := range s {
			smp[prefix+k] = v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := mstack.Open(ctx, mstack.Options{Device: "sim", Sim: mstack.SimOptions{Carrier: simnet.CarrierOptions{Radio: &cfg}}})
	if err != nil {
		return nil, fmt.Errorf("mhistack: %w", err)
	}
	e, err := openedEnv(s, nil)
	if err != nil {
		return nil, fmt.Errorf("mhistack: %w", err)
	}
	m, err := e.udpStream(d, w)
	if cerr := e.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("mhistack: %w", err)
	}
	add("mh_", m)
	if !root {
		return smp, nil
	}
	p, err := newTunPair(cfg)
	if err != nil {
		return nil, fmt.Errorf("linux: %w", err)
	}
	le, err := tunUDPEnv(p)
	if err != nil {
		p.close()
		return nil, fmt.Errorf("linux: %w", err)
	}
	l, err := le.udpStream(d, w)
	if cerr := le.close(); err == nil {
		err = cerr
	}
	p.close()
	if err != nil {
		return nil, fmt.Errorf("linux: %w", err)
	}
	add("lx_", l)
	return smp, nil
}

// tunUDPEnv is Linux between p's namespaces: the system under test's
// sockets in the device's namespace, the peer's in the network's.
func tunUDPEnv(p *tunPair) (*altEnv, error) {
	peerAddr := p.addr[netSide] + ":0"
	e, err := newAltEnv(func() (l net.Listener, err error) {
		nerr := p.run(netSide, func() { l, err = net.Listen("tcp4", peerAddr) })
		return l, errors.Join(nerr, err)
	}, func() (c net.PacketConn, err error) {
		nerr := p.run(netSide, func() { c, err = net.ListenPacket("udp4", peerAddr) })
		return c, errors.Join(nerr, err)
	}, func() error { return nil })
	if err != nil {
		return nil, err
	}
	e.dialTCP = func(ctx context.Context) (c net.Conn, err error) {
		var d net.Dialer
		nerr := p.run(devSide, func() { c, err = d.DialContext(ctx, "tcp4", e.peerTCP.Addr().String()) })
		return c, errors.Join(nerr, err)
	}
	e.dialUDP = func(ctx context.Context) (c net.Conn, err error) {
		var d net.Dialer
		nerr := p.run(devSide, func() { c, err = d.DialContext(ctx, "udp4", e.peerUDP.LocalAddr().String()) })
		return c, errors.Join(nerr, err)
	}
	e.stages = func() [nStages]uint64 {
		var v [nStages]uint64
		_ = p.run(devSide, func() { v[stageHost] = tunTXDropped(p.ifname[devSide]) + udpSndbufErrors() })
		r := p.link.Stats(radio.Up)
		v[stageRadio] = r.DroppedQueue + r.DroppedAQM + r.DroppedLoss + r.DroppedGap
		v[stageCarrier] = p.writeFails[netSide].Load()
		v[stageReceiver] = socketDrops(e.peerUDP)
		return v
	}
	return e, nil
}

// run runs f on a thread in side's namespace (sockets f opens belong to
// it); the thread is tainted and exits with its goroutine.
func (p *tunPair) run(side int, f func()) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		fd, err := unix.Open("/run/netns/"+p.ns[side], unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err == nil {
			f()
		}
		done <- err
	}()
	return <-done
}

// tunTXDropped is the tx_dropped count of interface name in the calling
// thread's namespace (/proc/thread-self/net/dev: the 4th transmit
// column), 0 if it cannot be read.
func tunTXDropped(name string) uint64 {
	f, err := os.Open("/proc/thread-self/net/dev")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ifn, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(ifn) != name {
			continue
		}
		// receive: bytes packets errs drop fifo frame compressed
		// multicast; transmit: bytes packets errs drop ...
		fs := strings.Fields(rest)
		if len(fs) < 12 {
			return 0
		}
		n, _ := strconv.ParseUint(fs[11], 10, 64)
		return n
	}
	return 0
}

// udpSndbufErrors is the Udp SndbufErrors of the calling thread's
// namespace (/proc/thread-self/net/snmp): datagrams a full qdisc or
// device refused (ENOBUFS), which Linux hides from a writer without
// IP_RECVERR.
func udpSndbufErrors() uint64 {
	b, err := os.ReadFile("/proc/thread-self/net/snmp")
	if err != nil {
		return 0
	}
	var header []string
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Udp: ")
		if !ok {
			continue
		}
		fs := strings.Fields(rest)
		if header == nil {
			header = fs
			continue
		}
		for i, h := range header {
			if h == "SndbufErrors" && i < len(fs) {
				n, _ := strconv.ParseUint(fs[i], 10, 64)
				return n
			}
		}
	}
	return 0
}
