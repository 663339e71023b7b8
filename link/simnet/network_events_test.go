package simnet

import (
	"slices"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
)

// eventLog is a started function that records what the network tells
// it, with the registration at each event.
type eventLog struct {
	n   *Network
	evs []netEvent
	reg []mbim.RegisterStateValue
}

func (l *eventLog) networkEventLocked(ev netEvent, _ mbim.NwError) {
	l.evs = append(l.evs, ev)
	l.reg = append(l.reg, l.n.st.reg)
}

// follow starts l on a registered network.
func follow(t *testing.T, n *Network) *eventLog {
	l := &eventLog{n: n}
	n.mu.Lock()
	stop := n.startLocked(l)
	n.radioChangedLocked()
	n.mu.Unlock()
	t.Cleanup(stop)
	return l
}

// TestCoverageLostReportsDeregistrationFirstThenComesBack: the modem
// reports itself deregistered before the calls end (so the host knows
// why), stays searching for the outage and registers and attaches
// again after it.
func TestCoverageLostReportsDeregistrationFirstThenComesBack(t *testing.T) {
	n := NewNetwork(NetworkConfig{})
	l := follow(t, n)
	n.mu.Lock()
	l.evs, l.reg = nil, nil
	n.mu.Unlock()

	n.OutOfCoverage(50 * time.Millisecond)
	n.mu.Lock()
	evs, reg := slices.Clone(l.evs), slices.Clone(l.reg)
	n.mu.Unlock()
	n.Reregister() // a retry during the outage does not register
	n.mu.Lock()
	if n.st.reg != mbim.RegisterSearching || n.st.ps != mbim.PacketServiceDetached {
		t.Errorf("during the outage: %v, %v; want searching, detached", n.st.reg, n.st.ps)
	}
	n.mu.Unlock()
	if len(evs) < 3 || evs[0] != evRegistration || reg[0] != mbim.RegisterDeregistered || evs[1] != evCallsDropped {
		t.Fatalf("events %v (registration %v): want deregistered, then the calls dropped", evs, reg)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.mu.Lock()
		back := n.st.reg == mbim.RegisterHome && n.st.ps == mbim.PacketServiceAttached
		n.mu.Unlock()
		if back {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not registered and attached 10 s after a 50 ms outage")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRoamingNetworkRegistersRoaming: NetworkConfig.Roaming registers
// the modem roaming and attaches it; Configure and Reregister bring it
// home.
func TestRoamingNetworkRegistersRoaming(t *testing.T) {
	n := NewNetwork(NetworkConfig{Roaming: true})
	follow(t, n)
	n.mu.Lock()
	if n.st.reg != mbim.RegisterRoaming || n.st.ps != mbim.PacketServiceAttached {
		t.Errorf("roaming network: %v, %v", n.st.reg, n.st.ps)
	}
	n.mu.Unlock()
	n.Configure(func(c *NetworkConfig) { c.Roaming = false })
	n.Reregister()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.st.reg != mbim.RegisterHome {
		t.Errorf("after coming home: %v", n.st.reg)
	}
}
