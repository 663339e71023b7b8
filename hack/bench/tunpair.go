package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/link/radio"
	mstack "github.com/mhistack/mhistack/stack"
)

// tunPair is table 10's Linux reference: two named network namespaces,
// the network's and the device's, each with a TUN device, and a relay in
// this process that carries every packet between the two TUNs through one
// link/radio model, the way the emulated carrier carries mhistack's:
// network → device is radio.Down, device → network is radio.Up. Linux TCP
// between the namespaces then crosses the same model as mhistack's.
//
// The namespaces are named (radioNSPrefix and this process's pid) so that
// helper processes can enter them with `ip netns exec`. close removes
// them, and with them the TUN devices; so does SIGINT or SIGTERM
// (onSignal), and a later bench removes those whose process is gone (a
// run killed with SIGKILL).
type tunPair struct {
	ns     [2]string   // [netSide], [devSide]
	ifname [2]string   // each side's TUN
	addr   [2]string   // each side's address
	tun    [2]*os.File // each side's TUN device, non-blocking (the runtime poller)
	link   *radio.Link
	// writeFails counts the model's deliveries into each side's TUN
	// that the TUN refused.
	writeFails [2]atomic.Uint64
	wg         sync.WaitGroup // the two readers
	undo       func()         // forgets the signal handler's removal
}

const (
	netSide, devSide = 0, 1
	radioNSPrefix    = "mhir"
)

// newTunPair makes the namespaces and TUNs and starts the relay through a
// new model of cfg. It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for
// `ip netns add`).
func newTunPair(cfg radio.Config) (*tunPair, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("not root")
	}
	removeStaleNS()
	pid := os.Getpid()
	p := &tunPair{addr: [2]string{"10.99.0.1", "10.99.0.2"}}
	p.undo = onSignal(p.remove)
	fail := func(err error) (*tunPair, error) { p.close(); return nil, err }
	for side, tag := range []string{"net", "dev"} {
		p.ns[side] = fmt.Sprintf("%s%d-%s", radioNSPrefix, pid, tag)
		if err := ipCmd("netns", "add", p.ns[side]); err != nil {
			p.ns[side] = ""
			return fail(err)
		}
		ifname := fmt.Sprintf("%s%d%c", radioNSPrefix, pid%1000000, tag[0])
		p.ifname[side] = ifname
		f, err := openTUN(ifname)
		if err != nil {
			return fail(err)
		}
		p.tun[side] = f
		peer := p.addr[1-side]
		for _, args := range [][]string{
			{"link", "set", ifname, "netns", p.ns[side]},
			{"-n", p.ns[side], "addr", "add", p.addr[side] + "/32", "peer", peer + "/32", "dev", ifname},
			{"-n", p.ns[side], "link", "set", ifname, "up"},
			{"-n", p.ns[side], "link", "set", "lo", "up"},
			// TCP buffer maxima as the gVisor stacks' (package stack's
			// DefaultTCPBufferMax), so that a 10 MB bandwidth-delay
			// product fits in Linux's windows as in theirs: a namespace
			// starts with the host's tcp_wmem, whose 4 MiB maximum holds
			// less than that in flight.
			{"netns", "exec", p.ns[side], "sysctl", "-q", "-w",
				fmt.Sprintf("net.ipv4.tcp_rmem=4096 131072 %d", mstack.DefaultTCPBufferMax),
				fmt.Sprintf("net.ipv4.tcp_wmem=4096 16384 %d", mstack.DefaultTCPBufferMax)},
		} {
			if err := ipCmd(args...); err != nil {
				return fail(err)
			}
		}
	}
	l, err := radio.New(cfg, p.writeTo(devSide), p.writeTo(netSide))
	if err != nil {
		return fail(err)
	}
	p.link = l
	p.wg.Add(2)
	go p.relay(netSide, radio.Down)
	go p.relay(devSide, radio.Up)
	return p, nil
}

// openTUN creates the TUN device name (IP packets, no packet-info
// header) in this namespace.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// relay reads side's TUN (what its namespace sends) into direction d of
// the model until the TUN is closed.
func (p *tunPair) relay(side int, d radio.Dir) {
	defer p.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := p.tun[side].Read(buf)
		if err != nil {
			return
		}
		if n > 0 && p.link.Send(d, 0, buf[:n]) != nil {
			return
		}
	}
}

// writeTo is the model's delivery into side's namespace. A write the TUN
// refuses is a packet lost, as on a wire.
func (p *tunPair) writeTo(side int) radio.Deliver {
	return func(_ uint32, pkt []byte) {
		if _, err := p.tun[side].Write(pkt); err != nil {
			p.writeFails[side].Add(1)
		}
	}
}

// close stops the relay and removes the namespaces with their TUNs.
func (p *tunPair) close() {
	if p.link != nil {
		p.link.Close() // no delivery after this
	}
	for _, f := range p.tun {
		if f != nil {
			f.Close() // ends the readers' Read
		}
	}
	p.wg.Wait()
	p.remove()
	p.undo()
}

// remove deletes the namespaces; deleting one deletes its TUN once no
// file refers to it.
func (p *tunPair) remove() {
	for i, n := range p.ns {
		if n != "" {
			_ = ipCmd("netns", "del", n)
			p.ns[i] = ""
		}
	}
}

var (
	signalMu   sync.Mutex
	signalFns  = map[int]func(){}
	signalNext int
	signalOnce sync.Once
)

// onSignal runs f if SIGINT or SIGTERM arrives before the returned undo
// is called; the process then exits with status 1.
func onSignal(f func()) (undo func()) {
	signalOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			s := <-ch
			signalMu.Lock()
			for _, f := range signalFns {
				f()
			}
			fmt.Fprintf(os.Stderr, "bench: %v: removed the radio namespaces\n", s)
			os.Exit(1)
		}()
	})
	signalMu.Lock()
	defer signalMu.Unlock()
	id := signalNext
	signalNext++
	signalFns[id] = f
	return func() {
		signalMu.Lock()
		delete(signalFns, id)
		signalMu.Unlock()
	}
}

// removeStaleNS deletes the radio namespaces of benches that are gone.
func removeStaleNS() {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), radioNSPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", pidText)); err == nil {
			continue
		}
		_ = ipCmd("netns", "del", e.Name())
	}
}
