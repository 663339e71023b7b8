package simnet

import "gvisor.dev/gvisor/pkg/tcpip/stack"

// GVisor returns the gVisor stack that terminates the host's flows on
// the network side, for tests that tune its TCP (a cap on the
// retransmission timeout, say). Its type follows the pinned gVisor
// version.
func (cn *CarrierNetwork) GVisor() *stack.Stack { return cn.s }
