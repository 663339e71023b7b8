package simnet

import (
	"slices"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
)

// eventLog is a started function that records what the network tells
// it, with the registration at each event.
type eventLog struct {
	n   *Network
	evs []netEvent
	reg []mbim.RegisterStateValue
}

func (l *eventLog) ipv6SessionsLocked(func(uint8, Carrier)) {}

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

// admit asks the network to admit a call on the default APN.
func admit(n *Network, family qmi.IPFamily) (mbim.Status, mbim.NwError) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.admitCallLocked("", "", "", family)
}

// A network refusing calls for a number of them refuses that many per
// call family with its cause, then admits; a new refusal counts again;
// one for a time admits once that time has passed since its first
// refusal.
func TestRefusedCallsAreCountedPerFamilyThenAdmitted(t *testing.T) {
	n := NewNetwork(NetworkConfig{ConnectReject: 26, ConnectRejectCalls: 2})
	follow(t, n)
	for i := range 2 {
		for _, f := range []qmi.IPFamily{0, qmi.IPv4, qmi.IPv6} {
			if st, nw := admit(n, f); st != mbim.StatusFailure || nw != 26 {
				t.Fatalf("call %d of family %d: %v, cause %d; want FAILURE with cause 26", i, f, st, nw)
			}
		}
	}
	for _, f := range []qmi.IPFamily{0, qmi.IPv4, qmi.IPv6} {
		if st, _ := admit(n, f); st != mbim.StatusNone {
			t.Fatalf("third call of family %d: %v, want admitted", f, st)
		}
	}
	if got := n.RefusedCalls(); got != 2 {
		t.Errorf("RefusedCalls %d, want 2", got)
	}

	n.RefuseCalls(33, 1, 0)
	if _, nw := admit(n, 0); nw != 33 || n.RefusedCalls() != 1 {
		t.Errorf("after RefuseCalls(33, 1): cause %d, %d refused", nw, n.RefusedCalls())
	}
	if st, _ := admit(n, 0); st != mbim.StatusNone {
		t.Errorf("second call after RefuseCalls(33, 1): %v", st)
	}

	n.RefuseCalls(38, 0, 20*time.Millisecond)
	start := time.Now()
	refused := 0
	for deadline := start.Add(10 * time.Second); ; {
		st, nw := admit(n, 0)
		if st == mbim.StatusNone {
			break
		}
		if nw != 38 || time.Now().After(deadline) {
			t.Fatalf("call refused with cause %d after %v", nw, time.Since(start))
		}
		refused++
		time.Sleep(time.Millisecond)
	}
	if since := time.Since(start); since < 20*time.Millisecond || refused != n.RefusedCalls() {
		t.Errorf("admitted after %v (want 20ms at least), refused %d, RefusedCalls %d", since, refused, n.RefusedCalls())
	}

	n.Configure(func(c *NetworkConfig) { c.ConnectReject = 0 })
	if st, _ := admit(n, 0); st != mbim.StatusNone {
		t.Errorf("with ConnectReject 0: %v", st)
	}
}
