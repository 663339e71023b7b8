package stack_test

import (
	"net/netip"
	"testing"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/linktest"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// rigKind is a modem and data pair a rig runs on.
type rigKind struct {
	name, profile, channel string
	framing                framing.Framing
	link                   framing.Framing
	// iova, when not 0, is the emulated bus's DMA window (the arena).
	iova uint64
}

var (
	rawIP = rigKind{name: "raw-ip", profile: "qcom-sdx55m", channel: "IP_HW0"}
	// mbimNTB: NTB16 framing both ways, the carrier aggregating DL
	// packets (up to 32 / 32 KiB per NTB).
	mbimNTB = rigKind{name: "mbim-ntb", profile: "quectel-rm5xx", channel: "IP_HW0_MBIM", framing: mbim.NTB{}, link: mbim.NTB{}}
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
	s     *stack.Stack
	cn    *simnet.CarrierNetwork
	modem *sim.Modem // the emulated modem (SetSlow, faults)
}

// newRig is a rig on qcom-sdx55m IP_HW0, raw IP.
func newRig(t testing.TB, cfg stack.Config) *rig { return newRigOn(t, cfg, rawIP) }

func newRigOn(t testing.TB, cfg stack.Config, k rigKind) *rig {
	t.Helper()
	r := &rig{}
	cn, err := simnet.NewCarrierNetwork(simnet.CarrierOptions{Framing: k.framing})
	if err != nil {
		t.Fatal(err)
	}
	r.cn = cn
	lo := rigLink
	lo.Channel, lo.Framing = k.channel, k.link
	lr, err := linktest.Start(linktest.Options{Options: mhitest.Options{ProfileName: k.profile, IOVAWindow: k.iova}, Link: lo, Function: cn})
	if err != nil {
		cn.Close()
		t.Fatal(err)
	}
	ep := lr.Endpoint
	r.modem = lr.Modem
	car := simnet.DefaultCarrier()
	if cfg.Addresses == nil {
		cfg.Addresses = []netip.Prefix{car.IPv4, car.IPv6}
	}
	if cfg.DNSServers == nil {
		cfg.DNSServers = append(append([]netip.Addr(nil), car.IPv4DNS...), car.IPv6DNS...)
	}
	// The stack closes the endpoint, then the rig (controller, device),
	// then the carrier; the cleanup reports the rig's failures.
	s, err := stack.NewWithClosers(ep, cfg, cn.Close, lr.Close)
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	t.Cleanup(func() {
		s.Close()
		mhitest.ReportClose(t, lr.Close)
	})
	return r
}
