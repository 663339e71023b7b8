package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"

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
	// e.g. "sim/foxconn-t99w175" or "0000:01:00.0/quectel-rm520n".
	Describe() string
	// Addresses are the data session's addresses.
	Addresses() []netip.Prefix
	// Metrics are the link, MHI and stack counters for -metrics.
	Metrics() []metricSource
	// CapturePcap writes every packet on the link to w until stop.
	CapturePcap(w io.Writer) (stop func() error, err error)
	// ServeMBIMProxy serves libmbim's proxy protocol on a Unix socket at
	// path, so mbimcli -p and ModemManager share the modem.
	ServeMBIMProxy(path string) (stop func() error, err error)
	Close() error
}

// openOptions are the bring-up flags.
type openOptions struct {
	Device      string // "sim" or a PCI address
	APN         string
	APNUser     string
	APNPassword string
	Logger      *slog.Logger
}

// opener brings a modem up; tests substitute one over the host network.
type opener func(ctx context.Context, o openOptions) (network, error)

// errNoStackOpen is the bring-up failure of this build: package stack has
// New (a stack over a link endpoint) but not yet Open, which walks device
// → MHI → MBIM session → link → stack. The proxy, flags, metrics and
// shutdown are complete and tested over the host network; this function
// becomes a call to stack.Open when it exists.
var errNoStackOpen = errors.New("bring-up needs stack.Open (device → MHI → data session → link → stack), " +
	"which is not in this build yet; the proxy itself is ready (package stack/proxy)")

// openModem brings up the device named by o.
func openModem(ctx context.Context, o openOptions) (network, error) {
	return nil, errNoStackOpen
}
