package simnet

import (
	"context"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
)

// serveDNS answers queries on one of the carrier's DNS addresses.
func (cn *CarrierNetwork) serveDNS(c *gonet.UDPConn) {
	defer cn.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		resp := cn.answerDNS(buf[:n])
		if resp != nil {
			cn.stats.dns.Add(1)
			c.WriteTo(resp, from)
		}
	}
}

// answerDNS builds the response to one query: A and AAAA from Hosts
// (and TestName), otherwise from the host's resolver.
func (cn *CarrierNetwork) answerDNS(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	question := qs[0]
	rh := dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true, Authoritative: true}
	name := question.Name.String()
	if len(name) > 0 && name[len(name)-1] == '.' {
		name = name[:len(name)-1]
	}
	var addrs []netip.Addr
	known := false
	if name == TestName {
		addrs, known = []netip.Addr{TestAddr4, TestAddr6}, true
	} else if a, ok := cn.opts.Hosts[name]; ok {
		addrs, known = a, true
	}
	if !known && (question.Type == dnsmessage.TypeA || question.Type == dnsmessage.TypeAAAA) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		cancel()
		if err == nil {
			addrs, known = res, true
		}
	}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	b.StartQuestions()
	b.Question(question)
	b.StartAnswers()
	rrh := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 60}
	for _, a := range addrs {
		a = a.Unmap()
		switch {
		case question.Type == dnsmessage.TypeA && a.Is4():
			rrh.Type = dnsmessage.TypeA
			b.AResource(rrh, dnsmessage.AResource{A: a.As4()})
		case question.Type == dnsmessage.TypeAAAA && a.Is6():
			rrh.Type = dnsmessage.TypeAAAA
			b.AAAAResource(rrh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
