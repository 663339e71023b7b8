package simnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// track registers closers of a flow and a goroutine count for it; false
// once the network is closed.
func (cn *CarrierNetwork) track(goroutines int, cs ...io.Closer) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return false
	}
	for _, c := range cs {
		cn.flows[c] = struct{}{}
	}
	cn.wg.Add(goroutines)
	return true
}

func (cn *CarrierNetwork) untrack(cs ...io.Closer) {
	cn.mu.Lock()
	for _, c := range cs {
		delete(cn.flows, c)
	}
	cn.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// hostAddr maps a destination of the carrier network to the host's.
func hostAddr(a tcpip.Address, port uint16) string {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	switch ip {
	case TestAddr4:
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case TestAddr6:
		ip = netip.IPv6Loopback()
	}
	return netip.AddrPortFrom(ip.Unmap(), port).String()
}

// forwardTCP runs on a goroutine of gVisor's forwarder for every SYN to
// an address the network has no listener for: it dials the host first,
// so that a refused or unreachable destination is answered with RST as a
// real path would (the host's stack then sees ECONNREFUSED).
func (cn *CarrierNetwork) forwardTCP(r *tcp.ForwarderRequest) {
	if !cn.track(1) {
		r.Complete(true)
		return
	}
	defer cn.wg.Done()
	id := r.ID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	hc, err := cn.opts.DialHost(ctx, "tcp", hostAddr(id.LocalAddress, id.LocalPort))
	cancel()
	if err != nil {
		cn.stats.refused.Add(1)
		cn.log.Debug("carrier: TCP forward refused", "dst", hostAddr(id.LocalAddress, id.LocalPort), "err", err)
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		hc.Close()
		r.Complete(true)
		return
	}
	r.Complete(false)
	ep.SocketOptions().SetDelayOption(false)
	gc := gonet.NewTCPConn(&wq, ep)
	cn.stats.tcp.Add(1)
	if !cn.track(1, gc, hc) {
		gc.Close()
		hc.Close()
		return
	}
	// A failed copy resets both sides, as a NAT does: a FIN would tell the
	// other end its stream ended cleanly when data was lost.
	var resetOnce sync.Once
	reset := func() {
		resetOnce.Do(func() {
			ep.Abort()
			if t, ok := hc.(*net.TCPConn); ok {
				t.SetLinger(0)
			}
			hc.Close()
			gc.Close()
		})
	}
	// Each direction ends its destination's write side at a clean end
	// of its source, so half-close travels through the network.
	up := make(chan struct{})
	go func() {
		defer cn.wg.Done()
		defer close(up)
		hcw, ok := hc.(halfCloser)
		if err := copyToHost(&cn.chunks, hc, ep, &wq); err != nil || !ok {
			reset()
			return
		}
		hcw.CloseWrite()
	}()
	if err := copyFromHost(&cn.chunks, ep, &wq, hc); err != nil {
		reset()
	} else {
		ep.Shutdown(tcpip.ShutdownWrite)
	}
	// A half-closed flow keeps running in the other direction: the flow
	// ends when both copies have.
	<-up
	cn.untrack(gc, hc)
}

// halfCloser is a connection that can end its write side.
type halfCloser interface{ CloseWrite() error }

// forwardUDP runs inline for the first datagram of a flow gVisor has no
// endpoint for.
func (cn *CarrierNetwork) forwardUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		return false
	}
	gc := gonet.NewUDPConn(&wq, ep)
	if !cn.track(1, gc) {
		gc.Close()
		return true
	}
	cn.stats.udp.Add(1)
	// Dialing is done on the flow's goroutine: a UDP "dial" is cheap, but
	// this handler runs on the device goroutine.
	go func() {
		defer cn.wg.Done()
		defer cn.untrack(gc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		hc, err := cn.opts.DialHost(ctx, "udp", hostAddr(id.LocalAddress, id.LocalPort))
		cancel()
		if err != nil {
			return
		}
		if !cn.track(1, hc) {
			hc.Close()
			return
		}
		go func() {
			defer cn.wg.Done()
			cn.copyUDP(gc, hc, nil, nil)
			gc.Close()
		}()
		cn.copyUDP(hc, gc, &cn.stats.udpRelayed, &cn.stats.udpRelayErrors)
		cn.untrack(hc)
	}()
	return true
}

// copyUDP copies datagrams until src has been idle for UDPIdle or fails;
// relayed and failed, if set, count the datagrams written and the one
// whose write failed.
//
// The read deadline is not moved per datagram (gonet makes a new timer
// for each SetReadDeadline, an allocation and two timer-heap operations
// per datagram): when it passes, the flow goes on if a datagram came
// within UDPIdle, with the deadline moved to UDPIdle after that one.
func (cn *CarrierNetwork) copyUDP(dst, src net.Conn, relayed, failed *atomic.Uint64) {
	buf := make([]byte, 65535)
	idle := cn.opts.UDPIdle
	last := time.Now()
	src.SetReadDeadline(last.Add(idle))
	for {
		n, err := src.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(last) < idle {
				src.SetReadDeadline(last.Add(idle))
				continue
			}
			return
		}
		last = time.Now()
		if _, err := dst.Write(buf[:n]); err != nil {
			if failed != nil {
				failed.Add(1)
			}
			return
		}
		if relayed != nil {
			relayed.Add(1)
		}
	}
}
