// Package unixpeer serves local programs on an abstract Unix socket for
// the control-protocol proxies that share a modem with them (link/mbim,
// link/qmi): it listens, accepts only peers whose user is allowed
// (SO_PEERCRED), and queues each connection's output.
package unixpeer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Cred returns the peer's user and process IDs.
func Cred(uc *net.UnixConn) (uid uint32, pid int32, err error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, cerr
	}
	return cred.Uid, cred.Pid, nil
}

// RootOrSelf is the default policy of the proxies: root and the process's
// own user may connect (libmbim's and libqmi's proxies allow root and
// their configured user).
func RootOrSelf() func(uid uint32) bool {
	me := uint32(os.Getuid())
	return func(uid uint32) bool { return uid == 0 || uid == me }
}

// Listen listens on the abstract unix socket name (Linux's "\0name",
// per network namespace).
func Listen(name string) (*net.UnixListener, error) {
	return net.ListenUnix("unix", &net.UnixAddr{Name: "@" + name, Net: "unix"})
}

// Accept accepts connections from ln and hands those whose peer's user
// allow accepts to serve (refused ones are closed and logged, prefixed
// by what). It returns when ln fails; the failure is logged unless
// stopped reports that ln was closed on purpose.
func Accept(ln net.Listener, allow func(uid uint32) bool, log *slog.Logger, what string, stopped func() bool, serve func(net.Conn)) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if !stopped() {
				log.Warn(what+": accept", "err", err)
			}
			return
		}
		if uc, ok := conn.(*net.UnixConn); ok {
			uid, pid, err := Cred(uc)
			if err != nil || !allow(uid) {
				log.Warn(what+": peer refused", "uid", uid, "pid", pid, "err", err)
				conn.Close()
				continue
			}
		}
		serve(conn)
	}
}

// Outbox is a connection's bounded queue of encoded messages and the
// writer that drains it, so that the modem's side never waits for a
// client that does not read.
type Outbox struct {
	out  chan []byte
	gone chan struct{}
}

// NewOutbox returns an outbox holding up to n messages.
func NewOutbox(n int) *Outbox {
	return &Outbox{out: make(chan []byte, n), gone: make(chan struct{})}
}

// Put queues b; it reports false when the queue is full (b is dropped).
// After Close it discards b and reports true.
func (o *Outbox) Put(b []byte) bool {
	select {
	case o.out <- b:
	case <-o.gone:
	default:
		return false
	}
	return true
}

// Run writes queued messages to conn until Close, or until a write
// fails, which closes conn.
func (o *Outbox) Run(conn net.Conn) {
	for {
		select {
		case b := <-o.out:
			if _, err := conn.Write(b); err != nil {
				conn.Close()
				return
			}
		case <-o.gone:
			return
		}
	}
}

// Close stops Run; call it once, when the connection's reader is done.
func (o *Outbox) Close() { close(o.gone) }

// DialClient connects to a proxy on the abstract unix socket name: it
// makes a client over the connection (newClient) and greets the proxy
// with it (greet), closing the client if that fails. Errors read
// "proto: proxy "name": ...".
func DialClient[C io.Closer](ctx context.Context, proto, name string, newClient func(net.Conn) C, greet func(C) error) (C, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", "@"+name)
	if err == nil {
		c := newClient(conn)
		if err = greet(c); err == nil {
			return c, nil
		}
		c.Close()
	}
	var none C
	return none, fmt.Errorf("%s: proxy %q: %w", proto, name, err)
}
