package stack_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// rigKind is a modem and data pair a rig runs on.
type rigKind struct {
	name, profile, channel string
	framing                framing.Framing
	link                   framing.Framing
}

var (
	rawIP = rigKind{"raw-ip", "qcom-sdx55m", "IP_HW0", nil, nil}
	// mbimNTB: NTB16 framing both ways, the carrier aggregating DL
	// packets (up to 32 / 32 KiB per NTB).
	mbimNTB = rigKind{"mbim-ntb", "quectel-rm5xx", "IP_HW0_MBIM", mbim.NTB{}, mbim.NTB{}}
	// rigKinds are what the end-to-end tests run on.
	rigKinds = []rigKind{rawIP, mbimNTB}
)

// rigLink is the base of the rigs' link options (benchmarks vary it).
var rigLink link.Options

// forKinds runs f as a subtest on every rig kind.
func forKinds(t *testing.T, f func(t *testing.T, k rigKind)) {
	for _, k := range rigKinds {
		t.Run(k.name, func(t *testing.T) { f(t, k) })
	}
}

// rig is a stack over an emulated modem (strict mode) whose data pair
// runs the carrier network, configured as the emulated MBIM function's
// DefaultCarrier would configure it.
type rig struct {
	s  *stack.Stack
	cn *simnet.CarrierNetwork

	mu       sync.Mutex
	failures []string
}

// newRig is a rig on qcom-sdx55m IP_HW0, raw IP.
func newRig(t testing.TB, cfg stack.Config) *rig { return newRigOn(t, cfg, rawIP) }

func newRigOn(t testing.TB, cfg stack.Config, k rigKind) *rig {
	t.Helper()
	r := &rig{}
	p, _ := mhi.Lookup(k.profile)
	cn, err := simnet.NewCarrierNetwork(simnet.CarrierOptions{Framing: k.framing})
	if err != nil {
		t.Fatal(err)
	}
	r.cn = cn
	dev, _, err := sim.NewDevice(p, sim.Options{
		Strict:      true,
		OnViolation: func(err error) { r.fail("protocol violation: " + err.Error()) },
		Functions:   map[string]sim.Function{k.channel: cn},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := mhi.New(dev, mhi.Options{Profile: p, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.PowerUp(ctx); err != nil {
		t.Fatal(err)
	}
	lo := rigLink
	lo.Channel, lo.Framing = k.channel, k.link
	ep, err := link.New(ctx, c, lo)
	if err != nil {
		t.Fatal(err)
	}
	car := simnet.DefaultCarrier()
	if cfg.Addresses == nil {
		cfg.Addresses = []netip.Prefix{car.IPv4, car.IPv6}
	}
	if cfg.DNSServers == nil {
		cfg.DNSServers = append(append([]netip.Addr(nil), car.IPv4DNS...), car.IPv6DNS...)
	}
	s, err := stack.NewWithClosers(ep, cfg, cn.Close, dev.Close, c.Close)
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	t.Cleanup(func() {
		s.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, f := range r.failures {
			t.Error(f)
		}
	})
	return r
}

func (r *rig) fail(s string) {
	r.mu.Lock()
	r.failures = append(r.failures, s)
	r.mu.Unlock()
}
