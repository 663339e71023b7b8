package simnet

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/mhistack/mhistack/link/siit"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
)

// serveDNS answers queries on one of the carrier's DNS addresses; with a
// valid dns64 it is a DNS64 (RFC 6147) synthesising with that prefix.
func (cn *CarrierNetwork) serveDNS(c *gonet.UDPConn, dns64 siit.Prefix) {
	defer cn.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		resp := cn.answerDNS(buf[:n], dns64)
		if resp != nil {
			cn.stats.dns.Add(1)
			c.WriteTo(resp, from)
		}
	}
}

// ipv4onlyName is the name RFC 7050 §2.2 has a host ask for AAAA records
// to learn the NAT64 prefix; its A records are ipv4onlyAddrs (RFC 7050
// §2.1, the IANA registration of 192.0.0.170 and 192.0.0.171).
const ipv4onlyName = "ipv4only.arpa"

var ipv4onlyAddrs = []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 0, 170}), netip.AddrFrom4([4]byte{192, 0, 0, 171})}

// answerDNS builds the response to one query: A and AAAA from Hosts
// (and TestName, TestName4 and ipv4only.arpa), otherwise from the host's resolver.
// With a valid dns64 an AAAA question for a name with A records but no
// AAAA records is answered with AAAA records synthesised under dns64
// (RFC 6147 §5.1.7), except for an IPv4 address the Well-Known Prefix
// must not carry (RFC 6052 §3.1); ipv4only.arpa's are synthesised under
// any prefix, as RFC 7050 §3 has the host look for them.
func (cn *CarrierNetwork) answerDNS(q []byte, dns64 siit.Prefix) []byte {
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
	switch {
	case name == TestName:
		addrs, known = []netip.Addr{TestAddr4, TestAddr6}, true
	case name == TestName4:
		addrs, known = []netip.Addr{TestAddr4}, true
	case strings.EqualFold(name, ipv4onlyName):
		addrs, known = ipv4onlyAddrs, true
	}
	if a, ok := cn.opts.Hosts[name]; ok && !known {
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
	if question.Type == dnsmessage.TypeAAAA && dns64.IsValid() {
		addrs = synthesize(addrs, dns64, strings.EqualFold(name, ipv4onlyName))
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

// synthesize returns addrs if it has an IPv6 address (RFC 6147 §5.1.4:
// real AAAA records are never replaced), else the AAAA records a DNS64
// makes of its IPv4 addresses under pfx (RFC 6147 §5.1.7); any says
// whether non-global addresses may be embedded in the Well-Known Prefix.
func synthesize(addrs []netip.Addr, pfx siit.Prefix, any bool) []netip.Addr {
	for _, a := range addrs {
		if a.Unmap().Is6() {
			return addrs
		}
	}
	var out []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		b, ok := pfx.Embed(a.As4())
		if !ok && any {
			b, ok = pfx.EmbedAny(a.As4())
		}
		if ok {
			out = append(out, netip.AddrFrom16(b))
		}
	}
	return out
}
