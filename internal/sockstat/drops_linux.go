package sockstat

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// skMeminfoDrops is SK_MEMINFO_DROPS, the index of the drop count in
// SO_MEMINFO's array (include/uapi/linux/sock_diag.h, which has 9).
const (
	skMeminfoDrops = 8
	skMeminfoVars  = 9
)

// Drops returns the packets the kernel dropped at c's socket since it
// was opened (getsockopt SO_MEMINFO, Linux 3.1 and later).
func Drops(c syscall.Conn) (uint64, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("sockstat: %w", err)
	}
	var mem [skMeminfoVars]uint32
	var serr error
	err = rc.Control(func(fd uintptr) {
		n := uint32(unsafe.Sizeof(mem))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e != 0:
			serr = e
		case n <= skMeminfoDrops*4:
			serr = fmt.Errorf("SO_MEMINFO gave %d bytes, no drop count", n)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return 0, fmt.Errorf("sockstat: SO_MEMINFO: %w", err)
	}
	return uint64(mem[skMeminfoDrops]), nil
}
