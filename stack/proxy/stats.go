package proxy

import "sync/atomic"

// Stats are the server's counters, read with Server.Stats. Fields ending
// in Active are gauges; all others only grow. Names are chosen to export
// as Prometheus metrics as they are (mhiproxy prefixes them).
type Stats struct {
	ConnsAccepted uint64 // TCP connections accepted on the listeners
	ConnsActive   uint64 // connections being served now
	ConnsRejected uint64 // refused because MaxConns was reached

	SOCKSConnects     uint64 // SOCKS5 CONNECTs relayed (target dialed)
	HTTPConnects      uint64 // HTTP CONNECTs relayed
	HTTPForwards      uint64 // absolute-URI HTTP requests forwarded
	HTTPPoolHits      uint64 // forwarded requests sent on an idle pooled origin connection
	HTTPPoolMisses    uint64 // forwarded requests that dialed a new origin connection
	DialErrors        uint64 // targets that could not be resolved or dialed
	AuthFailures      uint64 // wrong credentials or no acceptable method
	BadRequests       uint64 // malformed or unsupported requests (each answered and logged)
	HandshakeTimeouts uint64 // clients that did not finish their request in time

	BytesUp   uint64 // TCP payload client → target
	BytesDown uint64 // TCP payload target → client

	UDPAssociations         uint64 // UDP ASSOCIATEs granted
	UDPAssociationsActive   uint64
	UDPAssociationsRejected uint64 // refused because MaxAssociations was reached
	UDPFlows                uint64 // distinct destinations opened across associations
	UDPFlowsRejected        uint64 // datagrams dropped because MaxFlowsPerAssociation was reached
	UDPPacketsUp            uint64 // datagrams client → destination
	UDPPacketsDown          uint64 // datagrams destination → client
	UDPBytesUp              uint64 // UDP payload client → destination
	UDPBytesDown            uint64
	UDPDropped              uint64 // malformed, unresolvable or unsolicited datagrams
}

// counters is the live form of Stats.
type counters struct {
	ConnsAccepted, ConnsActive, ConnsRejected                          atomic.Uint64
	SOCKSConnects, HTTPConnects, HTTPForwards                          atomic.Uint64
	HTTPPoolHits, HTTPPoolMisses                                       atomic.Uint64
	DialErrors, AuthFailures, BadRequests, HandshakeTimeouts           atomic.Uint64
	BytesUp, BytesDown                                                 atomic.Uint64
	UDPAssociations, UDPAssociationsActive, UDPAssociationsRejected    atomic.Uint64
	UDPFlows, UDPFlowsRejected                                         atomic.Uint64
	UDPPacketsUp, UDPPacketsDown, UDPBytesUp, UDPBytesDown, UDPDropped atomic.Uint64
}

// Stats returns a snapshot of the counters. Each field is read atomically;
// the snapshot as a whole is not (a connection may be counted as accepted
// but not yet active).
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{
		ConnsAccepted:           c.ConnsAccepted.Load(),
		ConnsActive:             c.ConnsActive.Load(),
		ConnsRejected:           c.ConnsRejected.Load(),
		SOCKSConnects:           c.SOCKSConnects.Load(),
		HTTPConnects:            c.HTTPConnects.Load(),
		HTTPForwards:            c.HTTPForwards.Load(),
		HTTPPoolHits:            c.HTTPPoolHits.Load(),
		HTTPPoolMisses:          c.HTTPPoolMisses.Load(),
		DialErrors:              c.DialErrors.Load(),
		AuthFailures:            c.AuthFailures.Load(),
		BadRequests:             c.BadRequests.Load(),
		HandshakeTimeouts:       c.HandshakeTimeouts.Load(),
		BytesUp:                 c.BytesUp.Load(),
		BytesDown:               c.BytesDown.Load(),
		UDPAssociations:         c.UDPAssociations.Load(),
		UDPAssociationsActive:   c.UDPAssociationsActive.Load(),
		UDPAssociationsRejected: c.UDPAssociationsRejected.Load(),
		UDPFlows:                c.UDPFlows.Load(),
		UDPFlowsRejected:        c.UDPFlowsRejected.Load(),
		UDPPacketsUp:            c.UDPPacketsUp.Load(),
		UDPPacketsDown:          c.UDPPacketsDown.Load(),
		UDPBytesUp:              c.UDPBytesUp.Load(),
		UDPBytesDown:            c.UDPBytesDown.Load(),
		UDPDropped:              c.UDPDropped.Load(),
	}
}
