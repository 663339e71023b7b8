package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi/pci/vpci"
)

// The modem goes away under a relayed connection (hot-unplug: the device
// reads all-ones, the engine marks it removed): the connection ends
// instead of waiting on a dead link, and later dials fail at once with a
// message that says so. Before, the connection hung and dials waited for
// TCP's timeout.
func TestRemovedModemEndsConnectionsAndDialsFailClearly(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the emulated modem")
	}
	// A host server that sends forever, slowly.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					if _, err := c.Write(make([]byte, 1024)); err != nil {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nw, err := openModem(ctx, openOptions{Device: "sim", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close()
	m := nw.(*modem)
	addr := net.JoinHostPort("198.18.0.1", portOf(ln.Addr()))
	c, err := m.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, c)
		read <- err
	}()
	m.Controller().Device().(*vpci.Device).Remove()
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the relayed connection still open 10 s after the modem went away")
	}
	start := time.Now()
	_, err = m.DialContext(ctx, "tcp", addr)
	if !errors.Is(err, errModemRemoved) || time.Since(start) > time.Second {
		t.Errorf("dial after the removal: %v after %v, want errModemRemoved at once", err, time.Since(start))
	}
	if _, err := m.LookupNetIP(ctx, "ip", "test.mhistack"); !errors.Is(err, errModemRemoved) {
		t.Errorf("lookup after the removal: %v", err)
	}
	if err := nw.Close(); err != nil {
		t.Errorf("Close after the removal: %v", err)
	}
}
