// Package ndp encodes and parses the IPv6 Neighbor Discovery messages
// a cellular bearer carries between the host and the network's gateway:
// Router Advertisements (RFC 4861 §4.2) with their prefix information,
// MTU and PREF64 (RFC 8781) options, and Router Solicitations (RFC 4861
// §4.1). The emulated network (link/simnet) sends what the host's stack
// (package stack) reads, so both use this one codec.
//
// The first calls:
//
//	pkt := ndp.AppendRouterAdvert(nil, gatewayLL, ndp.AllNodes, &ra) // the network
//	if ndp.IsRouterAdvert(pkt) { ra, err := ndp.ParseRouterAdvert(pkt) } // the host
//	rs := ndp.AppendRouterSolicit(nil, hostLL)
//
// Parse validates as RFC 4861 §6.1.2 has a host do before it acts on a
// Router Advertisement; it never panics and allocates nothing.
package ndp
