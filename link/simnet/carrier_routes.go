package simnet

import (
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// dlRoute is a host address (4 or 16 bytes) and its session.
type dlRoute struct {
	addr    string
	session uint8
}

// maxDLRoutes bounds the learned addresses (a host spoofing sources
// cannot grow the table without bound); beyond it the oldest go.
const maxDLRoutes = 64

// learnRoute records that UL packet td came from its source address on
// session (framed pairs only). The common case, a known address on the
// same session, costs a short scan and no write.
func (cn *CarrierNetwork) learnRoute(session uint8, td []byte) {
	src := srcAddr(td)
	if src == nil {
		return
	}
	if rt := cn.routes.Load(); rt != nil {
		for _, r := range *rt {
			if r.addr == string(src) {
				if r.session == session {
					return
				}
				break
			}
		}
	}
	cn.routeMu.Lock()
	defer cn.routeMu.Unlock()
	var next []dlRoute
	if rt := cn.routes.Load(); rt != nil {
		for _, r := range *rt {
			if r.addr != string(src) {
				next = append(next, r)
			}
		}
	}
	if len(next) >= maxDLRoutes {
		next = next[1:]
	}
	next = append(next, dlRoute{addr: string(src), session: session})
	cn.routes.Store(&next)
}

// sessionFor returns the session a DL packet to the IP header hdr goes
// on: its destination's, else the session of the last UL packet.
func (cn *CarrierNetwork) sessionFor(hdr []byte) uint8 {
	if dst := dstAddr(hdr); dst != nil {
		if rt := cn.routes.Load(); rt != nil {
			for _, r := range *rt {
				if r.addr == string(dst) {
					return r.session
				}
			}
		}
	}
	return uint8(cn.session.Load())
}

func srcAddr(p []byte) []byte {
	switch {
	case len(p) >= header.IPv4MinimumSize && header.IPVersion(p) == header.IPv4Version:
		return p[12:16]
	case len(p) >= header.IPv6MinimumSize && header.IPVersion(p) == header.IPv6Version:
		return p[8:24]
	}
	return nil
}

func dstAddr(p []byte) []byte {
	switch {
	case len(p) >= header.IPv4MinimumSize && header.IPVersion(p) == header.IPv4Version:
		return p[16:20]
	case len(p) >= header.IPv6MinimumSize && header.IPVersion(p) == header.IPv6Version:
		return p[24:40]
	}
	return nil
}
