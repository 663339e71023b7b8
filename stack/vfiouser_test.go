package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vfiouserclient"
	"github.com/mhistack/mhistack/mhi/pci/vpci"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vfiouser"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// serveSim runs the emulated modem behind a vfio-user server on a UNIX
// socket, as mhictl sim serve -function IP_HW0=carrier does, and returns
// the socket's path and the server.
func serveSim(t *testing.T) (string, *vfiouser.Server) {
	t.Helper()
	return serveSimWith(t, nil)
}

// serveSimWith is serveSim with the server's model wrapped by wrap.
func serveSimWith(t *testing.T, wrap func(vpci.Model) vpci.Model) (string, *vfiouser.Server) {
	t.Helper()
	p, _ := mhi.Lookup("qcom-sdx55m")
	cn, err := simnet.NewCarrierNetwork(simnet.CarrierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := sim.New(p, sim.Options{
		Strict:      true,
		OnViolation: func(err error) { t.Error("protocol violation:", err) },
		Functions:   map[string]sim.Function{"IP_HW0": cn, "MBIM": simnet.NewMBIMFunction(simnet.MBIMConfig{})},
	})
	if err != nil {
		cn.Close()
		t.Fatal(err)
	}
	var model vpci.Model = m
	if wrap != nil {
		model = wrap(m)
	}
	srv, err := vfiouser.New(model, vfiouser.WithFaultHandler(func(f vpci.Fault) { t.Error("DMA fault:", f) }))
	if err != nil {
		cn.Close()
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "modem.sock")
	l, err := vfiouser.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
		cn.Close()
	})
	return path, srv
}

// shaEcho sends n random bytes through a TCP connection from s to a host
// echo server (198.18.0.1 is the host's 127.0.0.1 on the carrier network)
// while reading them back, and compares SHA-256 digests both ways.
func shaEcho(t *testing.T, s *stack.Stack, n int) {
	t.Helper()
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := s.DialContext(ctx, "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	data := make([]byte, n)
	rand.Read(data)
	sent := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		sent <- err
	}()
	h := sha256.New()
	if _, err := io.CopyN(h, c, int64(n)); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("writing: %v", err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("the echoed stream's SHA-256 differs from what was sent")
	}
}

func TestOpenVFIOUserMovesTCPIntact(t *testing.T) {
	path, srv := serveSim(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{Device: "vfio-user:" + path})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Controller().Profile().Name; got != "qcom-sdx55m" {
		t.Errorf("profile %s, want qcom-sdx55m (matched by the served PCI IDs)", got)
	}
	shaEcho(t, s, 4<<20)
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	st := srv.Stats()
	if st.DMAMaps != 1 || st.DMAFaults != 0 || st.DMAWindows != 0 {
		t.Errorf("server: %d DMA maps, %d faults, %d windows left after Close; want 1, 0, 0", st.DMAMaps, st.DMAFaults, st.DMAWindows)
	}
}

func TestOpenVFIOUserWithoutAServerFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := stack.Open(ctx, stack.Options{Device: "vfio-user:" + filepath.Join(t.TempDir(), "none.sock")})
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Open without a server = %v, want ENOENT", err)
	}
}

// stallModel hangs its server: the at-th BAR read blocks until release is
// closed, and the server, which handles one message at a time, answers
// nothing more (a hung or SIGSTOPped mhictl sim serve).
type stallModel struct {
	vpci.Model
	at      atomic.Int64
	reads   atomic.Int64
	stalled chan struct{}
	release chan struct{}
}

func newStallModel(at int64) *stallModel {
	m := &stallModel{stalled: make(chan struct{}), release: make(chan struct{})}
	m.at.Store(at)
	return m
}

func (m *stallModel) MMIORead(bar int, off uint64) uint32 {
	if m.reads.Add(1) == m.at.Load() {
		close(m.stalled)
		<-m.release
	}
	return m.Model.MMIORead(bar, off)
}

// A server that hangs in the middle of the bring-up: Open returns an
// error once the register read it waits on passes the vfio-user client's
// timeout (vfiouserclient.DefaultTimeout), not the much later end of its
// context, and does not hang.
func TestOpenVFIOUserOnAServerThatHangsDuringPowerUpFails(t *testing.T) {
	m := newStallModel(8)
	path, _ := serveSimWith(t, func(in vpci.Model) vpci.Model { m.Model = in; return m })
	t.Cleanup(func() { close(m.release) }) // before the server closes
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	start := time.Now()
	s, err := stack.Open(ctx, stack.Options{Device: "vfio-user:" + path})
	took := time.Since(start)
	if err == nil {
		s.Close()
		t.Fatal("Open on a server that hung succeeded")
	}
	select {
	case <-m.stalled:
	default:
		t.Fatalf("the server never hung (fewer than %d register reads); Open: %v", m.at.Load(), err)
	}
	if !errors.Is(err, mhi.ErrRemoved) || !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("Open = %v, want the device removed because the server did not answer in time", err)
	}
	if limit := 4 * vfiouserclient.DefaultTimeout; took > limit {
		t.Errorf("Open returned after %v, more than %v", took, limit)
	}
	t.Logf("Open returned after %v: %v", took, err)
}

// A server that hangs under an idle stack: the engine's liveness check
// reads a register, the read times out, the device is gone and the link
// goes down; Close does not hang.
func TestVFIOUserServerThatHangsUnderAnOpenStackTakesTheLinkDown(t *testing.T) {
	m := newStallModel(-1)
	path, _ := serveSimWith(t, func(in vpci.Model) vpci.Model { m.Model = in; return m })
	t.Cleanup(func() { close(m.release) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{Device: "vfio-user:" + path})
	if err != nil {
		t.Fatal(err)
	}
	m.at.Store(m.reads.Load() + 1) // the next register read hangs
	start := time.Now()
	deadline := time.After(60 * time.Second)
	for down := false; !down; {
		select {
		case e := <-s.Events():
			t.Logf("%v after %v", e, time.Since(start))
			down = e.Kind == stack.EventLinkDown
		case <-deadline:
			t.Fatal("no link-down 60 s after the server hung")
		}
	}
	select {
	case <-m.stalled:
	default:
		t.Fatal("the link went down but the server never hung")
	}
	took := time.Since(start)
	if took < vfiouserclient.DefaultTimeout {
		t.Errorf("the link went down %v after the server hung, before the client's %v timeout", took, vfiouserclient.DefaultTimeout)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Logf("link down after %v; Close: %v", took, err)
	case <-time.After(60 * time.Second):
		t.Fatal("Close on a stack whose server hung did not return")
	}
}

// TestOpenVFIOUserOnMhictlSimServe runs the server as its own process: the
// mhictl binary, built here, with the carrier network on IP_HW0.
func TestOpenVFIOUserOnMhictlSimServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/mhictl; skipped with -short")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mhictl")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/mhictl").CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/mhictl: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "modem.sock")
	cmd := exec.Command(bin, "sim", "serve", "-socket", sock, "-function", "IP_HW0=carrier")
	// Its own process group: a stopped process in a group that other
	// processes' exits orphan is sent SIGHUP and SIGCONT by the kernel,
	// which would end the stop below early.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(&log, sc.Text())
			if strings.Contains(sc.Text(), "serving the emulated modem") {
				close(ready)
			}
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	select {
	case <-ready:
	case err := <-exited:
		exited <- err
		t.Fatalf("mhictl sim serve exited: %v\n%s", err, log.String())
	case <-time.After(60 * time.Second):
		t.Fatal("mhictl sim serve did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{Device: "vfio-user:" + sock})
	if err != nil {
		t.Fatal(err)
	}
	shaEcho(t, s, 4<<20)
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	// The server process is still up and takes the next client.
	if c, err := net.Dial("unix", sock); err != nil {
		t.Errorf("the server stopped listening after the client left: %v", err)
	} else {
		c.Close()
	}
	// Stopped with SIGSTOP, the server's socket still accepts (the
	// kernel queues the connection) but nothing answers: Open fails
	// with the client's timeout instead of hanging.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Signal(syscall.SIGCONT) // before the SIGTERM above
	waitProcState(t, cmd.Process.Pid, 'T')
	ctx, cancel = context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	start := time.Now()
	s, err = stack.Open(ctx, stack.Options{Device: "vfio-user:" + sock})
	took := time.Since(start)
	if err == nil {
		s.Close()
		t.Fatalf("Open on a stopped server succeeded after %v (server state now %q)", took, procState(cmd.Process.Pid))
	}
	if !errors.Is(err, pci.ErrRemoved) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Open on a stopped server = %v, want pci.ErrRemoved and os.ErrDeadlineExceeded", err)
	}
	if took < vfiouserclient.DefaultTimeout || took > 4*vfiouserclient.DefaultTimeout {
		t.Errorf("Open on a stopped server returned after %v, want %v to %v", took, vfiouserclient.DefaultTimeout, 4*vfiouserclient.DefaultTimeout)
	}
	_ = os.Remove(sock)
}

// procState is the state letter of process pid (/proc/PID/stat's third
// field: R, S, T for stopped, ...), or "?" if it cannot be read.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "?"
	}
	// The command name, in parentheses, may hold spaces: the state
	// follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return "?"
	}
	return string(b[i+2])
}

// waitProcState waits until process pid is in state (a signal is
// delivered asynchronously).
func waitProcState(t *testing.T, pid int, state byte) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); procState(pid) != string(state); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is in state %q, not %q, after 30 s", pid, procState(pid), state)
		}
	}
}
