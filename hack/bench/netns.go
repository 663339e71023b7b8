package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// vethNS is table 5's kernel reference: a veth pair with one end in a
// network namespace of its own, so that Linux TCP and UDP between the two
// ends cross the veth (and the kernel's whole IP stack on both sides)
// rather than the loopback shortcut.
//
// The namespace is anonymous: one goroutine locks its OS thread and
// unshares the thread's network namespace, and sockets the bench opens in
// the namespace are created on that thread (a socket belongs to the
// namespace of the thread that created it, wherever it is used later).
// The goroutine never unlocks, so its thread exits with it; once it has
// and the namespace's sockets are closed, the kernel frees the namespace
// and with it both ends of the veth. So there is nothing to clean up even
// when the process is killed; close also deletes the root-side end at
// once.
type vethNS struct {
	do       chan func()
	exited   chan struct{}
	tid      int
	rootIf   string
	rootAddr string // the root namespace's end
	nsAddr   string // the namespace's end
}

// newVethNS creates the namespace and the veth pair and configures both
// ends (/30 from 10.254.0.0/16, picked by pid so that concurrent benches
// do not collide). It needs CAP_NET_ADMIN.
func newVethNS() (*vethNS, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, err
	}
	v := &vethNS{do: make(chan func()), exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(v.exited)
		runtime.LockOSThread() // never unlocked: the thread is tainted and exits with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			started <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		v.tid = unix.Gettid()
		started <- nil
		for f := range v.do {
			f()
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	pid := os.Getpid()
	v.rootIf = fmt.Sprintf("mhib%d", pid%10000000)
	nsIf := "mhibns0"
	sub := pid % (1 << 14) // a /30 of 10.254.0.0/16
	v.rootAddr = fmt.Sprintf("10.254.%d.%d", sub>>6, (sub&63)*4+1)
	v.nsAddr = fmt.Sprintf("10.254.%d.%d", sub>>6, (sub&63)*4+2)
	fail := func(err error) (*vethNS, error) { v.close(); return nil, err }
	// From the root namespace (this goroutine's thread is not the
	// tainted one): the peer is created straight in the namespace of the
	// locked thread, addressed by its tid.
	if err := ipCmd("link", "add", v.rootIf, "type", "veth", "peer", "name", nsIf, "netns", fmt.Sprint(v.tid)); err != nil {
		return fail(err)
	}
	if err := ipCmd("addr", "add", v.rootAddr+"/30", "dev", v.rootIf); err != nil {
		return fail(err)
	}
	if err := ipCmd("link", "set", v.rootIf, "up"); err != nil {
		return fail(err)
	}
	// Inside: a process forked from the locked thread inherits its
	// namespace.
	var err error
	v.run(func() {
		for _, args := range [][]string{{"addr", "add", v.nsAddr + "/30", "dev", nsIf}, {"link", "set", nsIf, "up"}, {"link", "set", "lo", "up"}} {
			if err = ipCmd(args...); err != nil {
				return
			}
		}
	})
	if err != nil {
		return fail(err)
	}
	return v, nil
}

// run runs f on the namespace's thread.
func (v *vethNS) run(f func()) {
	done := make(chan struct{})
	v.do <- func() { f(); close(done) }
	<-done
}

// listen opens a listener of network ("tcp4" or "udp4") in the namespace
// on the namespace's address.
func (v *vethNS) listenTCP() (l net.Listener, err error) {
	v.run(func() { l, err = net.Listen("tcp4", v.nsAddr+":0") })
	return l, err
}

func (v *vethNS) listenUDP() (c net.PacketConn, err error) {
	v.run(func() { c, err = net.ListenPacket("udp4", v.nsAddr+":0") })
	return c, err
}

// close lets the namespace's thread exit and deletes the root end of the
// veth (which deletes its peer too).
func (v *vethNS) close() {
	close(v.do)
	<-v.exited
	if v.rootIf != "" {
		_ = ipCmd("link", "del", v.rootIf)
	}
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
