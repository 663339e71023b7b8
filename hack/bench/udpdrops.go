package main

import (
	"net"
	"syscall"

	"github.com/mhistack/mhistack/internal/sockstat"
)

// The stages of table 5's UDP path where a datagram a write accepted can
// be dropped, in the order it crosses them; each path counts those it
// has (altEnv.stages).
const (
	// stageHost: the sending stack's transmit queue beyond what its
	// writers were told of, and its link endpoint (link.TXDrops): the
	// host drops no writer heard of. Should stay 0.
	stageHost = iota
	// stageModem: UL transfers the emulated modem did not deliver
	// (sim.Stats.ULDrops).
	stageModem
	// stageRadio: the carrier's radio model's UL queue and loss
	// (radio.Stats; no model in table 5).
	stageRadio
	// stageCarrier: the carrier network's own stack and relay: bad
	// checksums, a flow's full receive buffer, failed relay writes
	// (simnet.CarrierStats).
	stageCarrier
	// stageReceiver: the receiving socket's full receive buffer (the
	// kernel's SO_MEMINFO drops, or a package stack's
	// UDPReceiveBufferErrors).
	stageReceiver
	nStages
)

var udpStages = [nStages]string{"host", "modem", "radio", "carrier", "receiver"}

// socketDrops is what the kernel dropped at c's socket, 0 if c is not a
// kernel socket or the kernel does not say.
func socketDrops(c net.PacketConn) uint64 {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	n, err := sockstat.Drops(sc)
	if err != nil {
		return 0
	}
	return n
}
