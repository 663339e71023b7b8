package stack

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// ErrNoDNS is returned by lookups when the stack has no DNS servers (the
// session reported none and Config.DNSServers is empty).
var ErrNoDNS = errors.New("stack: no DNS servers")

// dnsTimeout bounds one query to one server; each server is tried twice.
const dnsTimeout = 2 * time.Second

// Resolver returns a *net.Resolver whose queries go through the stack to
// the modem's DNS servers, whatever servers the host is configured with.
// Note that Go's resolver still reads the host's /etc/hosts (and search
// domains) first; LookupHost and LookupNetIP of the Stack do not.
func (s *Stack) Resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			servers := s.DNSServers()
			if len(servers) == 0 {
				return nil, ErrNoDNS
			}
			srv := servers[rand.IntN(len(servers))]
			return s.DialContext(ctx, network, netip.AddrPortFrom(srv, 53).String())
		},
	}
}

// LookupHost resolves host through the modem's DNS and returns its
// addresses as strings.
func (s *Stack) LookupHost(ctx context.Context, host string) ([]string, error) {
	addrs, err := s.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out, nil
}

// LookupNetIP resolves host through the modem's DNS servers only: A
// and/or AAAA queries (network "ip", "ip4" or "ip6") over UDP, sent in
// parallel, each server tried in turn. IPv6 addresses come first.
func (s *Stack) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	dnsErr := func(err error, notFound bool) error {
		e := &net.DNSError{Err: err.Error(), Name: host, IsNotFound: notFound}
		if errors.Is(err, context.DeadlineExceeded) {
			e.IsTimeout = true
		}
		return e
	}
	if !validName(host) {
		// As package net: a name no server could hold is not found, at
		// once, without a query.
		return nil, dnsErr(errNoSuchHost, true)
	}
	servers := s.DNSServers()
	if len(servers) == 0 {
		return nil, dnsErr(ErrNoDNS, false)
	}
	name, err := dnsmessage.NewName(strings.TrimSuffix(host, ".") + ".")
	if err != nil {
		return nil, dnsErr(errNoSuchHost, true)
	}
	var types []dnsmessage.Type
	switch network {
	case "ip":
		types = []dnsmessage.Type{dnsmessage.TypeAAAA, dnsmessage.TypeA}
	case "ip4":
		types = []dnsmessage.Type{dnsmessage.TypeA}
	case "ip6":
		types = []dnsmessage.Type{dnsmessage.TypeAAAA}
	default:
		return nil, dnsErr(net.UnknownNetworkError(network), false)
	}
	type answer struct {
		addrs    []netip.Addr
		err      error
		notFound bool
	}
	answers := make([]answer, len(types))
	done := make(chan int, len(types))
	for i, t := range types {
		go func() {
			a, _, nf, err := s.query(ctx, servers, name, t)
			answers[i] = answer{a, err, nf}
			done <- i
		}()
	}
	for range types {
		<-done
	}
	var out []netip.Addr
	var firstErr error
	notFound := true
	for _, a := range answers {
		out = append(out, a.addrs...)
		if a.err != nil && firstErr == nil {
			firstErr = a.err
		}
		notFound = notFound && a.notFound
	}
	if len(out) > 0 {
		return out, nil
	}
	if firstErr == nil {
		firstErr = errNoSuchHost
	}
	return nil, dnsErr(firstErr, notFound && firstErr != nil)
}

// errNoSuchHost is package net's message for a name that does not exist.
var errNoSuchHost = errors.New("no such host")

// validName reports whether name can be a DNS name (RFC 1035 §2.3.4,
// with the leniency of package net's resolver: underscores allowed):
// at most 253 characters (254 with the final dot), labels of 1 to 63
// letters, digits, '-' or '_', not starting or ending with '-'.
func validName(name string) bool {
	if name == "." {
		return true
	}
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// query asks the servers in turn (twice round) for name's records of
// type t; ttl is the least TTL of those records (RFC 1035 §3.2.1);
// notFound is an authoritative NXDOMAIN or an empty answer.
func (s *Stack) query(ctx context.Context, servers []netip.Addr, name dnsmessage.Name, t dnsmessage.Type) (addrs []netip.Addr, ttl uint32, notFound bool, err error) {
	id := uint16(rand.Uint32())
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{ID: id, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, 0, false, err
	}
	if err := b.Question(dnsmessage.Question{Name: name, Type: t, Class: dnsmessage.ClassINET}); err != nil {
		// Never send a query without its question: the server would
		// answer nothing useful and the lookup would wait for timeouts.
		return nil, 0, false, err
	}
	q, err := b.Finish()
	if err != nil {
		return nil, 0, false, err
	}
	var lastErr error
	buf := make([]byte, 1500)
	for try := 0; try < 2*len(servers); try++ {
		srv := servers[try%len(servers)]
		c, err := s.DialUDP(ctx, netip.AddrPort{}, netip.AddrPortFrom(srv, 53))
		if err != nil {
			lastErr = err
			continue
		}
		addrs, ttl, nf, err := exchange(ctx, c, q, id, t, buf)
		c.Close()
		if err == nil {
			return addrs, ttl, nf, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, 0, false, lastErr
}

func exchange(ctx context.Context, c *UDPConn, q []byte, id uint16, t dnsmessage.Type, buf []byte) ([]netip.Addr, uint32, bool, error) {
	deadline := time.Now().Add(dnsTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(q); err != nil {
		return nil, 0, false, err
	}
	for {
		n, err := c.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, false, ctx.Err()
			}
			return nil, 0, false, err
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil || h.ID != id || !h.Response {
			continue // not ours: keep waiting
		}
		if h.RCode == dnsmessage.RCodeNameError {
			return nil, 0, true, nil
		}
		if h.RCode != dnsmessage.RCodeSuccess {
			return nil, 0, false, errors.New("DNS server: " + h.RCode.String())
		}
		if err := p.SkipAllQuestions(); err != nil {
			return nil, 0, false, err
		}
		var out []netip.Addr
		ttl := uint32(0)
		for {
			rh, err := p.AnswerHeader()
			if err != nil {
				break
			}
			switch {
			case rh.Type == dnsmessage.TypeA && t == dnsmessage.TypeA:
				r, err := p.AResource()
				if err != nil {
					return nil, 0, false, err
				}
				out = append(out, netip.AddrFrom4(r.A))
				ttl = leastTTL(ttl, rh.TTL, len(out))
			case rh.Type == dnsmessage.TypeAAAA && t == dnsmessage.TypeAAAA:
				r, err := p.AAAAResource()
				if err != nil {
					return nil, 0, false, err
				}
				out = append(out, netip.AddrFrom16(r.AAAA))
				ttl = leastTTL(ttl, rh.TTL, len(out))
			default:
				if err := p.SkipAnswer(); err != nil {
					return out, ttl, len(out) == 0, nil
				}
			}
		}
		return out, ttl, len(out) == 0, nil
	}
}

// leastTTL is the least of ttl, the TTL of the first n-1 records, and
// the n-th record's, rr.
func leastTTL(ttl, rr uint32, n int) uint32 {
	if n == 1 {
		return rr
	}
	return min(ttl, rr)
}
