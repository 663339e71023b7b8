// Package vfiouser serves a vpci device model to another process over the
// vfio-user protocol (qemu docs/interop/vfio-user.rst), so that a QEMU
// guest with a vfio-user-pci device sees the model as a PCI function and
// its kernel drives it: Linux's own MHI drivers against the emulated modem
// (docs/KERNEL-CROSSCHECK.md). It is the out-of-process twin of
// vpci.Bus and gives the model the same Host semantics: DMA checked against
// the client's DMA maps and gated by bus mastering, faults recorded, MSIs
// delivered to the eventfds the client installed. Config space is
// pci.NewConfigSpace's (BAR sizing, MSI) with a PCI PM capability in front,
// so that a guest kernel can also runtime-suspend the function (pm.go).
//
//	srv, err := vfiouser.New(model, vfiouser.WithLogger(log))
//	l, err := vfiouser.Listen("/run/modem.sock")
//	go srv.Serve(l)   // one client at a time; returns after Close
//	defer srv.Close() // closes the client, detaches the model
//
// Guest RAM is the device's DMA space: the client passes each RAM section
// as a file descriptor (QEMU: memory-backend-memfd,share=on) with DMA_MAP,
// and the server maps it, so DMA is a memory copy. Sections sent without a
// descriptor are recorded but refused as DMA targets (the message-based
// DMA_READ/WRITE path is not implemented; docs/KERNEL-CROSSCHECK.md §6 shows
// why it would be fragile with QEMU 10.2).
//
// The server hosts one model for its whole life. A client that disconnects
// leaves the function as a machine power-off would: the model is reset,
// every DMA map and interrupt is released, and the next client starts from
// power-on.
package vfiouser

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
)

// ErrClosed is returned by Serve and ServeConn once the server is closed.
var ErrClosed = errors.New("vfiouser: server closed")

// Option configures New.
type Option func(*Server)

// WithLogger sends the server's logs to l: connections and failures at
// Info/Warn, every message at Debug.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithFaultHandler calls f, on the model goroutine that attempted it, for
// every refused DMA (as vpci.WithFaultHandler does).
func WithFaultHandler(f func(vpci.Fault)) Option { return func(s *Server) { s.onFault = f } }

// Server hosts one vpci.Model for vfio-user clients.
type Server struct {
	model   vpci.Model
	id      pci.Identity
	cfg     *pci.ConfigSpace
	log     *slog.Logger
	onFault func(vpci.Fault)

	// cfgMu serialises config writes and resets with the Command mirror
	// the data paths read without a lock.
	cfgMu sync.Mutex
	cmd   atomic.Uint32

	// life orders Close after MMIO and resets already inside the model,
	// so that the model sees no register access after Detach.
	life   sync.RWMutex
	closed atomic.Bool
	// offline is set while a client is being torn down: DMA fails as
	// after a surprise removal (quietly, for the model) and MSIs are
	// dropped.
	offline atomic.Bool

	dma dmaTable
	irq irqTable
	pm  pmState

	mu       sync.Mutex // guards the fields below
	listener net.Listener
	conn     *net.UnixConn
	serving  sync.WaitGroup
	closing  sync.Once

	faultMu sync.Mutex
	faults  [faultHistory]vpci.Fault
	nFaults int

	stats counters
}

// faultHistory is how many faults Faults keeps, as vpci does.
const faultHistory = 64

// counters are the atomics behind Stats.
type counters struct {
	messages, badMessages, connections               atomic.Uint64
	mmioReads, mmioWrites, mmioUnclaimed             atomic.Uint64
	configReads, configWrites                        atomic.Uint64
	dmaRead, dmaWritten, dmaFaults, dmaMaps          atomic.Uint64
	dmaUnmapped                                      atomic.Uint64
	msiRaised, msiDelivered, msiDropped, deviceReset atomic.Uint64
}

// Stats counts what crossed the link since New.
type Stats struct {
	Connections uint64 // clients served
	Messages    uint64 // messages received
	// BadMessages counts requests answered with an error (malformed,
	// unsupported or refused).
	BadMessages uint64
	MMIOReads   uint64 // 32-bit BAR reads that reached the model
	MMIOWrites  uint64 // 32-bit BAR writes that reached the model
	// MMIOUnclaimed counts BAR accesses the server answered itself
	// (all-ones reads, dropped writes): not 4 bytes naturally aligned,
	// memory decoding off, or the function in D3hot.
	MMIOUnclaimed uint64
	ConfigReads   uint64
	ConfigWrites  uint64
	DMAMaps       uint64 // DMA_MAP requests accepted
	// DMAUnmapped counts windows removed (or cut) by DMA_UNMAP ranges.
	DMAUnmapped uint64
	// DMAWindows is how many DMA windows are mapped now (adjacent maps
	// of contiguous memory count once).
	DMAWindows      int
	DMABytesRead    uint64 // guest memory read by the device
	DMABytesWritten uint64 // guest memory written by the device
	DMAFaults       uint64 // refused DMA transactions (the latest are in Faults)
	MSIRaised       uint64 // RaiseMSI calls by the model
	MSIDelivered    uint64 // eventfd writes
	// MSIDropped counts MSIs with no eventfd installed for their vector,
	// raised with bus mastering off or in D3hot, while no client is
	// connected, or after Close.
	MSIDropped   uint64
	DeviceResets uint64
}

// New builds config space for m (pci.NewConfigSpace: BAR sizing, the MSI
// capability) and attaches m; the model may start its goroutines now. It
// sees DMA and MSIs through the server from then on.
func New(m vpci.Model, opts ...Option) (*Server, error) {
	if m == nil {
		return nil, errors.New("vfiouser: nil model")
	}
	id := m.Identity()
	cfg, err := pci.NewConfigSpace(id)
	if err != nil {
		return nil, fmt.Errorf("vfiouser: %w", err)
	}
	s := &Server{model: m, id: id, cfg: cfg}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.irq.max = cfg.MSICapable()
	m.Attach(&hostPort{s: s})
	return s, nil
}

// Listen creates a UNIX socket listener at path, replacing a stale socket
// left by an earlier run (but not any other kind of file).
func Listen(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("vfiouser: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("vfiouser: removing stale socket: %w", err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vfiouser: %w", err)
	}
	return l, nil
}

// Socketpair returns the two ends of a connected AF_UNIX stream socket
// pair, for a client in the same process: ServeConn one end, give the
// other to the client (mhi/pci/vfiouserclient.New). It is what
// mhi/mhitest's vfio-user rig and the tests of this package and of
// vfiouserclient serve over.
func Socketpair() (server, client *net.UnixConn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("vfiouser: socketpair: %w", err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "vfio-user")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 0 {
				unix.Close(fds[1])
			} else {
				conns[0].Close()
			}
			return nil, nil, fmt.Errorf("vfiouser: socketpair: %w", err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	return conns[0], conns[1], nil
}

// Serve accepts clients on l and serves them one after the other (QEMU
// connects once, at device realize, and never reconnects). It returns
// ErrClosed after Close, or the listener's error. Serve closes l.
func (s *Server) Serve(l *net.UnixListener) error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	s.listener = l
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()
	defer l.Close()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if s.closed.Load() {
				return ErrClosed
			}
			return fmt.Errorf("vfiouser: accept: %w", err)
		}
		if err := s.serveConn(c); errors.Is(err, ErrClosed) {
			return err
		}
	}
}

// ServeConn serves one client until it disconnects (nil), the connection
// fails or the client breaks the framing (an error), or Close (ErrClosed).
// It closes c. Only one client may be served at a time.
func (s *Server) ServeConn(c *net.UnixConn) error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		c.Close()
		return ErrClosed
	}
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()
	return s.serveConn(c)
}

func (s *Server) serveConn(c *net.UnixConn) error {
	s.mu.Lock()
	switch {
	case s.closed.Load():
		s.mu.Unlock()
		c.Close()
		return ErrClosed
	case s.conn != nil:
		s.mu.Unlock()
		c.Close()
		return errors.New("vfiouser: a client is already connected")
	}
	s.conn = c
	s.mu.Unlock()
	s.stats.connections.Add(1)
	s.log.Info("vfio-user client connected")

	err := newConn(s, c).run()

	s.mu.Lock()
	s.conn = nil
	s.mu.Unlock()
	c.Close()
	s.disconnect()
	if s.closed.Load() {
		return ErrClosed
	}
	if err != nil {
		s.log.Warn("vfio-user client dropped", "err", err)
		return err
	}
	s.log.Info("vfio-user client disconnected")
	return nil
}

// disconnect returns the function to power-on state after a client left:
// the model is reset while its DMA fails quietly, then every DMA map and
// MSI eventfd of the client is released.
func (s *Server) disconnect() {
	s.offline.Store(true)
	s.resetFunction()
	s.dma.clear()
	s.offline.Store(false)
}

// resetFunction is a function-level reset (DEVICE_RESET, or a client
// leaving): the model first, so that its goroutines are quiet before bus
// mastering goes off (as vpci.Device.Reset), then config space, then the
// MSI eventfds. DMA maps survive: they belong to the client, not to the
// function.
func (s *Server) resetFunction() {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return
	}
	s.stats.deviceReset.Add(1)
	s.model.Reset()
	s.cfgMu.Lock()
	s.cfg.Reset()
	s.pm.reset()
	s.cmd.Store(uint32(s.cfg.Command()))
	s.cfgMu.Unlock()
	s.irq.clear()
}

// Close disconnects the client, stops Serve, detaches the model and
// releases every mapping and eventfd. It is idempotent and returns when no
// server goroutine is left.
func (s *Server) Close() error {
	s.closing.Do(func() {
		s.mu.Lock()
		// Under mu, so that Serve/ServeConn either see closed or are
		// counted in serving before Wait.
		s.life.Lock()
		s.closed.Store(true)
		s.life.Unlock()
		if s.listener != nil {
			s.listener.Close()
		}
		if s.conn != nil {
			s.conn.Close()
		}
		s.mu.Unlock()
		s.serving.Wait()
		s.model.Detach()
		s.irq.clear()
		s.dma.clear()
	})
	return nil
}

// Identity returns the model's identity (IDs, BARs, MSI vectors).
func (s *Server) Identity() pci.Identity { return s.id }

// Stats returns the counters. It keeps working after Close.
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{
		Connections: c.connections.Load(), Messages: c.messages.Load(), BadMessages: c.badMessages.Load(),
		MMIOReads: c.mmioReads.Load(), MMIOWrites: c.mmioWrites.Load(), MMIOUnclaimed: c.mmioUnclaimed.Load(),
		ConfigReads: c.configReads.Load(), ConfigWrites: c.configWrites.Load(),
		DMAMaps: c.dmaMaps.Load(), DMABytesRead: c.dmaRead.Load(), DMABytesWritten: c.dmaWritten.Load(),
		DMAFaults: c.dmaFaults.Load(), MSIRaised: c.msiRaised.Load(), MSIDelivered: c.msiDelivered.Load(),
		MSIDropped: c.msiDropped.Load(), DeviceResets: c.deviceReset.Load(),
		DMAUnmapped: c.dmaUnmapped.Load(), DMAWindows: s.dma.windows(),
	}
}

// Faults returns the latest refused DMAs (at most 64), oldest first.
func (s *Server) Faults() []vpci.Fault {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	n := min(s.nFaults, faultHistory)
	out := make([]vpci.Fault, 0, n)
	for i := s.nFaults - n; i < s.nFaults; i++ {
		out = append(out, s.faults[i%faultHistory])
	}
	return out
}

// record logs a fault, calls the handler and returns the fault as an error.
func (s *Server) record(f vpci.Fault) error {
	s.faultMu.Lock()
	s.faults[s.nFaults%faultHistory] = f
	s.nFaults++
	n := s.nFaults
	s.faultMu.Unlock()
	s.stats.dmaFaults.Add(1)
	if n <= faultHistory {
		s.log.Warn("DMA refused", "fault", f.Error())
	}
	if s.onFault != nil {
		s.onFault(f)
	}
	return f
}
