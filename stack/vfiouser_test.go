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
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
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
	srv, err := vfiouser.New(m, vfiouser.WithFaultHandler(func(f vpci.Fault) { t.Error("DMA fault:", f) }))
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
	_ = os.Remove(sock)
}
