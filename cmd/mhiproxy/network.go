package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/mhi"
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
	// Metrics are the link, MHI and stack counters for -metrics; the
	// modem's own (MHI) are marked perDevice, since every session of the
	// modem returns them.
	Metrics() []metricSource
	// CapturePcap writes every packet on the link to w until stop.
	CapturePcap(w io.Writer) (stop func() error, err error)
	// ServeMBIMProxy serves libmbim's proxy protocol on the abstract
	// Unix socket name (libmbim's clients only know "mbim-proxy"), so
	// mbimcli -p and ModemManager share the modem.
	ServeMBIMProxy(name string) (stop func() error, err error)
	// ServeQMIProxy serves libqmi's proxy protocol on the abstract Unix
	// socket name (libqmi's clients only know "qmi-proxy"), so qmicli -p
	// and ModemManager share a QMI session's modem.
	ServeQMIProxy(name string) (stop func() error, err error)
	// OpenSession brings up one more data session on the same modem
	// (-session), with its own addresses and DNS servers; closing it
	// leaves this one running.
	OpenSession(ctx context.Context, s sessionSpec) (network, error)
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
	// RadioInterval is how often the radio gauges are refreshed
	// (default defaultRadioInterval).
	RadioInterval time.Duration
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
	if prof, ok := strings.CutPrefix(o.Device, "sim:"); ok {
		so.Device, so.Profile = "sim", prof
	}
	so.APN, so.User, so.Password = o.APN, o.APNUser, o.APNPassword
	if so.Logger == nil {
		so.Logger = o.Logger
	}
	s, err := stack.Open(ctx, so)
	if err != nil {
		return nil, err
	}
	m := &modem{Stack: s, device: o.Device, log: so.Logger}
	m.radio = startRadioPoller(s.RadioStatus, o.RadioInterval, so.Logger)
	return watchRemoval(m), nil
}

// watchRemoval makes m follow its controller's removal events.
func watchRemoval(m *modem) *modem {
	if c := m.Controller(); c != nil {
		m.unsub = c.Subscribe(func(e mhi.Event) {
			if e.Kind == mhi.EventRemoved {
				m.removed(e.Err)
			}
		})
	}
	return m
}

// OpenSession implements network with stack.Modem.OpenSession.
func (m *modem) OpenSession(ctx context.Context, sp sessionSpec) (network, error) {
	if err := m.removedErr("open session", ""); err != nil {
		return nil, err
	}
	md := m.Stack.Modem()
	if md == nil {
		return nil, errors.New("no modem under this stack")
	}
	s, err := md.OpenSession(ctx, stack.SessionOptions{APN: sp.apn, User: sp.user, Password: sp.password})
	if err != nil {
		return nil, err
	}
	return watchRemoval(&modem{Stack: s, device: m.device, log: m.log}), nil
}

// modem is a *stack.Stack from stack.Open as mhiproxy's network.
//
// When the modem goes away (hot-unplug: the kernel asked for it back and
// the MHI engine released it; or it stopped answering), the stack is
// closed at once, which ends every relayed connection, and from then on
// dials, lookups and UDP associations fail with errModemRemoved's message,
// so that clients get a clear error (HTTP 502 with the reason, SOCKS
// general failure) instead of waiting on a dead link. mhiproxy keeps
// running: a supervisor or the user restarts it when the modem is back.
type modem struct {
	*stack.Stack
	device string
	log    *slog.Logger

	unsub     func()
	radio     *radioPoller          // nil for a modem not from openModem
	gone      atomic.Pointer[error] // why, once the modem was removed
	bg        sync.WaitGroup        // the closing goroutine removed starts
	closeOnce sync.Once
	closeErr  error
}

// errModemRemoved is what clients are told after the modem went away.
var errModemRemoved = errors.New("the modem was removed; restart mhiproxy once it is back")

// removed runs on a controller goroutine (it must not block): it records
// the removal and closes the stack in the background.
func (m *modem) removed(cause error) {
	err := fmt.Errorf("%w (%s: %v)", errModemRemoved, m.device, cause)
	if !m.gone.CompareAndSwap(nil, &err) {
		return
	}
	m.log.Error("modem removed: closing every connection; clients get an error from now on", "device", m.device, "err", cause)
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		_ = m.closeStack()
	}()
}

func (m *modem) closeStack() error {
	m.closeOnce.Do(func() { m.closeErr = m.Stack.Close() })
	return m.closeErr
}

// Close closes the stack (once) and waits for a removal's closing.
func (m *modem) Close() error {
	if m.unsub != nil {
		m.unsub()
	}
	if m.radio != nil {
		m.radio.stop()
	}
	err := m.closeStack()
	m.bg.Wait()
	if m.gone.Load() != nil {
		return nil // the removal's errors were logged with it
	}
	return err
}

// removedErr is the error for op after a removal, or nil.
func (m *modem) removedErr(op, network string) error {
	if e := m.gone.Load(); e != nil {
		return &net.OpError{Op: op, Net: network, Err: *e}
	}
	return nil
}

func (m *modem) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if err := m.removedErr("dial", network); err != nil {
		return nil, err
	}
	return m.Stack.DialContext(ctx, network, address)
}

func (m *modem) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if err := m.removedErr("lookup", network); err != nil {
		return nil, err
	}
	return m.Stack.LookupNetIP(ctx, network, host)
}

func (m *modem) ListenPacket(network, address string) (net.PacketConn, error) {
	if err := m.removedErr("listen", network); err != nil {
		return nil, err
	}
	return m.Stack.ListenPacket(network, address)
}

func (m *modem) Describe() string {
	if c := m.Controller(); c != nil {
		return m.device + "/" + c.Profile().Name
	}
	return m.device
}

// stackKind: the stack's open-connection and in-flight counts are gauges,
// everything else counts up.
func stackKind(field string) prometheus.ValueType {
	if strings.HasPrefix(field, "Active") || strings.HasPrefix(field, "InFlight") {
		return prometheus.GaugeValue
	}
	return prometheus.CounterValue
}

func (m *modem) Metrics() []metricSource {
	// stack.Stats carries the link endpoint's Stats in its Link field:
	// they become mhiproxy_stack_link_*.
	srcs := []metricSource{{name: "stack", stats: func() any { return m.Stats() }, kind: stackKind}}
	if c := m.Controller(); c != nil {
		srcs = append(srcs, metricSource{name: "mhi", stats: func() any { return c.Stats() }, perDevice: true, kind: func(f string) prometheus.ValueType {
			if f == "LastRecovery" {
				return prometheus.GaugeValue
			}
			return prometheus.CounterValue
		}})
	}
	if p := m.radio; p != nil {
		srcs = append(srcs, metricSource{name: "radio", collect: p.collect, perDevice: true})
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

func (m *modem) ServeQMIProxy(name string) (func() error, error) {
	c := m.QMI()
	if c == nil {
		return nil, errNoQMI
	}
	p, err := qmi.ListenProxy(c, qmi.ProxyOptions{Name: name, Logger: m.log})
	if err != nil {
		return nil, err
	}
	return p.Close, nil
}

var errNoMBIM = errors.New("the data session does not run on MBIM (see -control)")
var errNoQMI = errors.New("the data session does not run on QMI (see -control)")

var _ network = (*modem)(nil)
