// Package unixpeer checks who is at the other end of a Unix socket
// (SO_PEERCRED), for the control-protocol proxies that share a modem with
// local programs (link/mbim, link/qmi).
package unixpeer

import (
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
