package stack

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// fallbackDelay is how long a happy-eyeballs dial waits for the first
// address family before starting the other (RFC 8305 §8, Go's 300 ms).
const fallbackDelay = 300 * time.Millisecond

// Dial connects to address on network with a background context; see
// DialContext.
func (s *Stack) Dial(network, address string) (net.Conn, error) {
	return s.DialContext(context.Background(), network, address)
}

// DialContext connects to address on network, like net.Dialer.DialContext:
//
//   - "tcp", "tcp4", "tcp6": address is host:port; the result is a
//     *TCPConn.
//   - "udp", "udp4", "udp6": a connected *UDPConn.
//   - "ping", "ping4", "ping6": address is a host; a connected *PingConn.
//
// Names are resolved through the modem's DNS servers only (never the
// host's resolver or /etc/hosts). With both families available, TCP uses
// happy eyeballs: IPv6 first, IPv4 300 ms later, the first connection
// wins.
func (s *Stack) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	opErr := func(err error) error { return &net.OpError{Op: "dial", Net: network, Err: err} }
	var host, port string
	switch network {
	case "ping", "ping4", "ping6":
		host = address
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
		var err error
		if host, port, err = net.SplitHostPort(address); err != nil {
			return nil, opErr(err)
		}
	default:
		return nil, opErr(net.UnknownNetworkError(network))
	}
	fam := "ip" + network[len(network)-1:]
	if !strings.HasSuffix(network, "4") && !strings.HasSuffix(network, "6") {
		fam = "ip"
	}
	addrs, err := s.resolve(ctx, fam, host)
	if err != nil {
		return nil, opErr(err)
	}
	if strings.HasPrefix(network, "ping") {
		c, err := s.DialPing(ctx, netip.Addr{}, addrs[0])
		if err != nil {
			return nil, err // not a typed nil
		}
		return c, nil
	}
	p, err := parsePort(strings.TrimRight(network, "46"), port)
	if err != nil {
		return nil, opErr(err)
	}
	if strings.HasPrefix(network, "udp") {
		c, err := s.dialUDP(ctx, network, netip.AddrPort{}, netip.AddrPortFrom(addrs[0], p))
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	return s.dialHappy(ctx, addrs, p)
}

func parsePort(network, port string) (uint16, error) {
	if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		return uint16(n), nil
	}
	// Service names come from the host's services database, a local
	// file: no name leaves the machine.
	n, err := net.LookupPort(network, port)
	return uint16(n), err
}

// resolve turns host into addresses of family fam ("ip", "ip4", "ip6"):
// a literal as is, a name through the modem's DNS, ordered IPv6 first and
// limited to the families the stack has addresses of.
func (s *Stack) resolve(ctx context.Context, fam, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		if fam == "ip4" && !a.Is4() || fam == "ip6" && !a.Is6() {
			return nil, &net.AddrError{Err: errNoSuitableAddress, Addr: host}
		}
		return []netip.Addr{a}, nil
	}
	if host == "" {
		return nil, &net.AddrError{Err: "missing host", Addr: host}
	}
	if fam == "ip" {
		has4, has6 := s.families()
		switch {
		case has4 && !has6:
			fam = "ip4"
		case has6 && !has4:
			fam = "ip6"
		}
	}
	return s.LookupNetIP(ctx, fam, host)
}

// families reports whether the stack has IPv4 and global IPv6 addresses.
func (s *Stack) families() (has4, has6 bool) {
	for _, p := range s.Addresses() {
		a := p.Addr()
		if a.Is4() {
			has4 = true
		} else if !a.IsLinkLocalUnicast() {
			has6 = true
		}
	}
	return
}

// dialHappy races the addresses' families (RFC 8305, simplified as in
// package net: one primary and one fallback family, each tried in order).
func (s *Stack) dialHappy(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, error) {
	var primary, fallback []netip.Addr
	for _, a := range addrs {
		if a.Is4() == addrs[0].Is4() {
			primary = append(primary, a)
		} else {
			fallback = append(fallback, a)
		}
	}
	serial := func(ctx context.Context, list []netip.Addr) (net.Conn, error) {
		var first error
		for _, a := range list {
			c, err := s.DialTCP(ctx, netip.AddrPort{}, netip.AddrPortFrom(a, port))
			if err == nil {
				return c, nil
			}
			if first == nil {
				first = err
			}
			if ctx.Err() != nil || errors.Is(err, ErrTooManyConns) || errors.Is(err, ErrTooManyDials) {
				break
			}
		}
		return nil, first
	}
	if len(fallback) == 0 {
		return serial(ctx, primary)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		c       net.Conn
		err     error
		primary bool
	}
	results := make(chan result, 2)
	start := func(list []netip.Addr, prim bool) {
		go func() {
			c, err := serial(ctx, list)
			results <- result{c, err, prim}
		}()
	}
	start(primary, true)
	timer := time.NewTimer(fallbackDelay)
	defer timer.Stop()
	pending, started := 1, false
	var firstErr error
	for {
		select {
		case <-timer.C:
			if !started {
				started = true
				pending++
				start(fallback, false)
			}
		case r := <-results:
			pending--
			if r.err == nil {
				// Cancel and collect the loser so that no goroutine
				// or connection outlives the call.
				cancel()
				for ; pending > 0; pending-- {
					if o := <-results; o.c != nil {
						o.c.Close()
					}
				}
				return r.c, nil
			}
			if firstErr == nil || r.primary {
				firstErr = r.err
			}
			if !started {
				started = true
				pending++
				timer.Stop()
				start(fallback, false)
			}
			if pending == 0 {
				return nil, firstErr
			}
		}
	}
}

// Listen listens on address ("host:port", ":port") for network "tcp",
// "tcp4" or "tcp6"; see ListenTCP. With "tcp6" and no host the listener
// accepts IPv6 only, as package net's.
func (s *Stack) Listen(network, address string) (net.Listener, error) {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	ap, err := listenAddr(network, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	l, err := s.listenTCP(network, ap)
	if err != nil {
		return nil, err // not a typed nil
	}
	return l, nil
}

// ListenPacket listens on address for "udp", "udp4", "udp6" (a
// *UDPConn) or "ping", "ping4", "ping6" (a *PingConn; address is a local
// address, or empty for ping4/ping6).
func (s *Stack) ListenPacket(network, address string) (net.PacketConn, error) {
	switch network {
	case "udp", "udp4", "udp6":
		ap, err := listenAddr(network, address)
		if err != nil {
			return nil, &net.OpError{Op: "listen", Net: network, Err: err}
		}
		c, err := s.listenUDP(network, ap)
		if err != nil {
			return nil, err // not a typed nil
		}
		return c, nil
	case "ping", "ping4", "ping6":
		a := netip.IPv4Unspecified()
		if network == "ping6" {
			a = netip.IPv6Unspecified()
		}
		if address != "" {
			var err error
			if a, err = netip.ParseAddr(address); err != nil {
				return nil, &net.OpError{Op: "listen", Net: network, Err: &net.AddrError{Err: "invalid IP address", Addr: address}}
			}
			a = a.Unmap()
			if network == "ping4" && !a.Is4() || network == "ping6" && !a.Is6() {
				return nil, &net.OpError{Op: "listen", Net: network, Err: &net.AddrError{Err: errNoSuitableAddress, Addr: address}}
			}
		}
		c, err := s.ListenPing(a)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
}

// errNoSuitableAddress is package net's message for an address of the
// wrong family.
const errNoSuitableAddress = "no suitable address found"

// listenAddr parses a listen address; an empty host is unspecified of
// the network's family (both for "tcp"/"udp").
func listenAddr(network, address string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := parsePort(strings.TrimRight(network, "46"), port)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if host == "" {
		switch {
		case strings.HasSuffix(network, "4"):
			return netip.AddrPortFrom(netip.IPv4Unspecified(), p), nil
		default:
			return netip.AddrPortFrom(netip.IPv6Unspecified(), p), nil
		}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, &net.AddrError{Err: "invalid IP address", Addr: host}
	}
	a = a.Unmap()
	if strings.HasSuffix(network, "4") && !a.Is4() || strings.HasSuffix(network, "6") && !a.Is6() {
		return netip.AddrPort{}, &net.AddrError{Err: errNoSuitableAddress, Addr: host}
	}
	return netip.AddrPortFrom(a, p), nil
}

// HTTPClient returns an HTTP client whose connections go through the
// stack (names resolved by the modem's DNS). It is shared: Close closes
// its idle connections.
func (s *Stack) HTTPClient() *http.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.http == nil {
		s.http = &http.Transport{
			DialContext:           s.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	return &http.Client{Transport: s.http}
}
