package stack_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// rig is a stack over the emulated qcom-sdx55m (strict mode) whose
// IP_HW0 pair runs the carrier network, configured as the emulated
// MBIM function's DefaultCarrier would configure it.
type rig struct {
	s  *stack.Stack
	cn *sim.CarrierNetwork

	mu       sync.Mutex
	failures []string
}

func newRig(t testing.TB, cfg stack.Config) *rig {
	t.Helper()
	r := &rig{}
	p, _ := mhi.Lookup("qcom-sdx55m")
	cn, err := sim.NewCarrierNetwork(sim.CarrierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.cn = cn
	dev, _, err := sim.NewDevice(p, sim.Options{
		Strict:      true,
		OnViolation: func(err error) { r.fail("protocol violation: " + err.Error()) },
		Functions:   map[string]sim.Function{"IP_HW0": cn},
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
	ep, err := link.New(ctx, c, link.Options{})
	if err != nil {
		t.Fatal(err)
	}
	car := sim.DefaultCarrier()
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
