package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/stack"
	"github.com/mhistack/mhistack/stack/proxy"
)

// network is what mhiproxy needs from a brought-up modem: package stack's
// *Stack after stack.Open (device → MHI → data session → link → stack),
// seen through the proxy's interfaces plus what the binary reports.
type network interface {
	proxy.Dialer
	proxy.Resolver
	ListenPacket(network, address string) (net.PacketConn, error)

	// Describe names the device and its profile for the ready line,
	// e.g. "sim/qcom-sdx55m" or "0000:01:00.0/quectel-rm520n".
	Describe() string
	// Addresses are the data session's addresses.
	Addresses() []netip.Prefix
	// Metrics are the link, MHI and stack counters for -metrics.
	Metrics() []metricSource
	// CapturePcap writes every packet on the link to w until stop.
	CapturePcap(w io.Writer) (stop func() error, err error)
	// ServeMBIMProxy serves libmbim's proxy protocol on the abstract
	// Unix socket name (libmbim's clients only know "mbim-proxy"), so
	// mbimcli -p and ModemManager share the modem.
	ServeMBIMProxy(name string) (stop func() error, err error)
	Close() error
}

// openOptions are the bring-up flags.
type openOptions struct {
	Device      string // "sim" or a PCI address
	APN         string
	APNUser     string
	APNPassword string
	Logger      *slog.Logger
	// Stack is passed to stack.Open after the fields above are applied
	// (tests tune the emulated modem through it).
	Stack stack.Options
}

// opener brings a modem up; tests substitute one over the host network.
type opener func(ctx context.Context, o openOptions) (network, error)

// openModem brings up the device named by o with stack.Open: "sim" is the
// emulated modem with the MBIM function and the carrier network behind it
// (198.18.0.1 and test.mhistack are the host's loopback), a PCI address a
// modem bound to vfio-pci.
func openModem(ctx context.Context, o openOptions) (network, error) {
	so := o.Stack
	so.Device = o.Device
	so.APN, so.User, so.Password = o.APN, o.APNUser, o.APNPassword
	if so.Logger == nil {
		so.Logger = o.Logger
	}
	s, err := stack.Open(ctx, so)
	if err != nil {
		return nil, err
	}
	return &modem{Stack: s, device: o.Device, log: so.Logger}, nil
}

// modem is a *stack.Stack from stack.Open as mhiproxy's network.
type modem struct {
	*stack.Stack
	device string
	log    *slog.Logger
}

func (m *modem) Describe() string {
	if c := m.Controller(); c != nil {
		return m.device + "/" + c.Profile().Name
	}
	return m.device
}

// stackKind: the stack's open-connection and in-flight counts are gauges,
// everything else counts up.
func stackKind(field string) string {
	if strings.HasPrefix(field, "Active") || strings.HasPrefix(field, "InFlight") {
		return "gauge"
	}
	return "counter"
}

func (m *modem) Metrics() []metricSource {
	// stack.Stats carries the link endpoint's Stats in its Link field:
	// they become mhiproxy_stack_link_*.
	srcs := []metricSource{{name: "stack", stats: func() any { return m.Stats() }, kind: stackKind}}
	if c := m.Controller(); c != nil {
		srcs = append(srcs, metricSource{name: "mhi", stats: func() any { return c.Stats() }, kind: func(f string) string {
			if f == "LastRecovery" {
				return "gauge"
			}
			return "counter"
		}})
	}
	return srcs
}

func (m *modem) CapturePcap(w io.Writer) (func() error, error) {
	return m.Stack.CapturePcap(w, 0)
}

func (m *modem) ServeMBIMProxy(name string) (func() error, error) {
	c := m.MBIM()
	if c == nil {
		return nil, errNoMBIM
	}
	p, err := mbim.ListenProxy(c, mbim.ProxyOptions{Name: name, Logger: m.log})
	if err != nil {
		return nil, err
	}
	return p.Close, nil
}

var errNoMBIM = errors.New("the data session does not run on MBIM (see -control)")

var _ network = (*modem)(nil)
