// Package sockstat reads what the kernel counts for one of its sockets:
// Drops is the packets it dropped at the socket (a full receive buffer,
// a failed filter), the per-socket count behind Linux's UDP RcvbufErrors.
//
//	c, _ := net.ListenUDP("udp4", addr)
//	n, err := sockstat.Drops(c)
package sockstat
