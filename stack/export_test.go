package stack

import (
	"github.com/mhistack/mhistack/link/simnet"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TCPEndpointForTest is c's gVisor endpoint, for reading the socket
// options the stack set.
func TCPEndpointForTest(c *TCPConn) tcpip.Endpoint { return c.ep }

// NewWithClosers is New plus teardown functions run by Close after the
// stack is gone, last first (what Open does with its pipeline).
func NewWithClosers(ep gstack.LinkEndpoint, cfg Config, closers ...func() error) (*Stack, error) {
	s, err := New(ep, cfg)
	if err != nil {
		return nil, err
	}
	s.closers = closers
	return s, nil
}

// ClosingForTest reports whether Close has begun (the transmit queue's
// writer knows it).
func (s *Stack) ClosingForTest() bool { return s.txw != nil && s.txw.closing.Load() }

// SetBridgeTimeForTest sets how long a lost bearer is bridged, until
// restore (tests that run it do not run in parallel).
func SetBridgeTimeForTest(d time.Duration) (restore func()) {
	old := bridgeTime
	bridgeTime = d
	return func() { bridgeTime = old }
}

// LoseBearerForTest is what Open's follower does when the data session is
// lost with its addresses kept (bearerDown: the stack bridges the outage).
func (s *Stack) LoseBearerForTest() { s.bearerDown() }

// RestoreBearerForTest is the session back with the same addresses.
func (s *Stack) RestoreBearerForTest() { s.setLinkUp(true, true) }

// CarrierStatsForTest is what the emulated carrier network under s's
// modem saw (Open with Device "sim").
func CarrierStatsForTest(s *Stack) simnet.CarrierStats { return s.modem.opts.simCarrier.Stats() }

// CarrierForTest is the emulated carrier network under s's modem, for
// tests that reach s's listeners from the network (Dial).
func CarrierForTest(s *Stack) *simnet.CarrierNetwork { return s.modem.opts.simCarrier }
