package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vfiouser"
	"github.com/mhistack/mhistack/mhi/sim"
)

// The control socket of `mhictl sim serve -control PATH`: a test harness
// injects the modem's faults at run time, at the moment it chooses (mid-
// transfer), and reads counters, without signals. One command per line,
// one reply line each ("ok …" or "error …"):
//
//	syserr          the modem crashes: SYS_ERR (a firmware crash, as the
//	                host sees it); same as SIGUSR1. Alias: crash
//	slow DURATION   the modem sleeps DURATION per TRE and per event (a slow
//	                device; "slow 0" restores full speed)
//	m1              the modem goes idle (device-initiated M0 → M1)
//	fail-bhi CODE   the next BHI download fails with BHI_ERRCODE CODE
//	refuse-pdn CAUSE[:LIMIT]
//	                the network refuses data sessions with 3GPP cause
//	                CAUSE, for ever or for LIMIT attempts or time
//	                (sim serve -refuse-pdn); "refuse-pdn off" ends it
//	deactivate CAUSE
//	                the network ends every data session with CAUSE, the
//	                modem staying attached (simnet.Network.DeactivateCalls)
//	renumber [VALID]
//	                the network moves every IPv6 session to another /64
//	                while it stays up: it advertises the new prefix and the
//	                old one deprecated, valid for VALID (default 5m), then
//	                routes the old one no more (simnet.Network.RenumberIPv6)
//	stats           one line: the modem state, DMA windows, refused DMAs,
//	                host protocol violations, and carrier counters (logged
//	                too, as SIGUSR2 does)
//	help            the list of commands
const controlHelp = "commands: syserr|crash, slow DURATION, m1, fail-bhi CODE, refuse-pdn CAUSE[:LIMIT]|off, deactivate CAUSE, renumber [VALID], stats, help"

// controlRequest is one command for the goroutine that owns the modem's
// fault injection (watchModem), so that faults are logged in order with
// the modem's state changes.
type controlRequest struct {
	line  string
	reply chan string
}

// controlServer accepts control connections until Close.
type controlServer struct {
	l    *net.UnixListener
	reqs chan<- controlRequest
	log  *slog.Logger
	wg   sync.WaitGroup

	stop chan struct{} // closed by Close: nobody may answer requests any more

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

// listenControl removes a stale socket at path and listens on it.
func listenControl(path string, reqs chan<- controlRequest, log *slog.Logger) (*controlServer, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	s := &controlServer{l: l, reqs: reqs, log: log, stop: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *controlServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *controlServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		req := controlRequest{line: line, reply: make(chan string, 1)}
		var reply string
		select {
		case s.reqs <- req:
			reply = <-req.reply // a taken request is always answered
		case <-s.stop:
			return
		}
		s.log.Info("control", "command", line, "reply", reply)
		if _, err := fmt.Fprintln(c, reply); err != nil {
			return
		}
	}
}

// Close stops accepting, closes the connections and waits for them.
func (s *controlServer) Close() {
	s.mu.Lock()
	if !s.done {
		close(s.stop)
	}
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.l.Close()
	s.wg.Wait()
}

// control runs one command on the goroutine that owns fault injection;
// crash is that goroutine's SYS_ERR injection.
func control(line string, m *sim.Modem, srv *vfiouser.Server, nw *simnet.Network, crash func(why string) error, report func() string) string {
	f := strings.Fields(line)
	arg := func() (string, bool) {
		if len(f) != 2 {
			return "", false
		}
		return f[1], true
	}
	switch f[0] {
	case "syserr", "crash":
		if len(f) != 1 {
			break
		}
		if err := crash("control: " + f[0]); err != nil {
			return "error " + err.Error()
		}
		return "ok SYS_ERR"
	case "slow":
		v, ok := arg()
		d, err := time.ParseDuration(v)
		if !ok || err != nil || d < 0 {
			return "error usage: slow DURATION (e.g. slow 2ms, slow 0)"
		}
		m.SetSlow(d)
		return "ok slow " + d.String()
	case "m1":
		if len(f) != 1 {
			break
		}
		if err := m.EnterM1(); err != nil {
			return "error " + err.Error()
		}
		return "ok M1"
	case "fail-bhi":
		v, ok := arg()
		code, err := strconv.ParseUint(v, 0, 32)
		if !ok || err != nil || code == 0 {
			return "error usage: fail-bhi CODE (non-zero)"
		}
		m.FailNextBHI(uint32(code))
		return "ok fail-bhi " + v
	case "refuse-pdn":
		v, ok := arg()
		if ok && v == "off" {
			nw.RefuseCalls(0, 0, 0)
			return "ok refuse-pdn off"
		}
		var r refusalFlag
		if err := r.Set(v); !ok || err != nil {
			return "error usage: refuse-pdn CAUSE[:COUNT|:DURATION] or refuse-pdn off (e.g. refuse-pdn 26:3)"
		}
		nw.RefuseCalls(r.cause, r.calls, r.d)
		return "ok refuse-pdn " + r.String()
	case "deactivate":
		v, ok := arg()
		cause, err := strconv.ParseUint(v, 10, 8)
		if !ok || err != nil || cause == 0 {
			return "error usage: deactivate CAUSE (a 3GPP cause, e.g. 36 regular deactivation, 26 insufficient resources)"
		}
		nw.DeactivateCalls(mbim.NwError(cause))
		return "ok deactivate " + v
	case "renumber":
		var valid time.Duration
		if len(f) > 2 {
			break
		}
		if v, ok := arg(); ok {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "error usage: renumber [VALID] (how long the old prefix stays valid, e.g. renumber 30s; default 5m)"
			}
			valid = d
		}
		next := nw.RenumberIPv6(valid)
		if len(next) == 0 {
			return "error renumber: no IPv6 session is up"
		}
		out := "ok renumber"
		for _, p := range next {
			out += " " + p.String()
		}
		return out
	case "stats":
		if len(f) != 1 {
			break
		}
		st, ee := m.State()
		ss, ms := srv.Stats(), m.Stats()
		return fmt.Sprintf("ok state=%s ee=%s dma_windows=%d dma_faults=%d violations=%d resets=%d msi_delivered=%d %s",
			st, ee, ss.DMAWindows, ss.DMAFaults, ms.Violations, ss.DeviceResets, ss.MSIDelivered, report())
	case "help":
		return "ok " + controlHelp
	}
	return "error unknown command " + strconv.Quote(line) + "; " + controlHelp
}

// controlCall sends one command to a control socket and returns the reply
// line (the client side, for tests and scripts).
func controlCall(ctx context.Context, path, line string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	r, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(r), err
}

func init() {
	register(&command{
		Name:  "sim control",
		Short: "Inject a fault into a running sim serve, or read its stats.",
		Summary: `Send one command to the control socket of a running "mhictl sim serve -control
PATH" and print its reply: syserr (alias crash), slow DURATION, m1,
fail-bhi CODE, refuse-pdn CAUSE[:LIMIT]|off, deactivate CAUSE, renumber
[VALID], stats or help (see "mhictl sim serve -h"). Exit 1 when the modem answers with an
error.`,
		Run: simControl,
	})
}

func simControl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["sim control"]
	fs := newFlagSet(c, "-socket PATH COMMAND [ARG]", stderr)
	socket := fs.String("socket", "", "the control socket `path` (sim serve -control; required)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *socket == "" {
		return usagef("-socket is required")
	}
	if fs.NArg() == 0 {
		return usagef("a command is required (%s)", controlHelp)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	reply, err := controlCall(ctx, *socket, strings.Join(fs.Args(), " "))
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, reply)
	if !strings.HasPrefix(reply, "ok") {
		return errors.New(strings.TrimPrefix(reply, "error "))
	}
	return nil
}
