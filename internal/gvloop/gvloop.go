// Package gvloop makes the gVisor stack that the link tests and
// hack/bench run TCP through an emulated modem with: one NIC holding two
// addresses, whose traffic between them is not short-cut (the stack does
// not handle local traffic itself), so every segment crosses the link
// endpoint and the modem's loopback function.
package gvloop

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// NIC is the ID of the stack's only NIC.
const NIC tcpip.NICID = 1

// New returns a gVisor stack (IPv4, TCP) whose NIC on ep holds a
// (10.0.0.1) and b (10.0.0.2), with the default route through it.
// Destroy the stack when done: that removes the NIC, which closes ep. On
// error the stack is destroyed already.
func New(ep stack.LinkEndpoint) (s *stack.Stack, a, b tcpip.Address, err error) {
	s = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
	})
	if err := s.CreateNIC(NIC, ep); err != nil {
		s.Destroy()
		return nil, a, b, fmt.Errorf("CreateNIC: %v", err)
	}
	a = tcpip.AddrFrom4([4]byte{10, 0, 0, 1})
	b = tcpip.AddrFrom4([4]byte{10, 0, 0, 2})
	for _, addr := range []tcpip.Address{a, b} {
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: addr.WithPrefix()}
		if err := s.AddProtocolAddress(NIC, pa, stack.AddressProperties{}); err != nil {
			s.Destroy()
			return nil, a, b, fmt.Errorf("AddProtocolAddress: %v", err)
		}
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: NIC}})
	return s, a, b, nil
}
