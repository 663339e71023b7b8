//go:build !linux

package sockstat

import (
	"errors"
	"syscall"
)

// Drops returns the packets the kernel dropped at c's socket; only Linux
// counts them per socket (SO_MEMINFO).
func Drops(c syscall.Conn) (uint64, error) {
	return 0, errors.New("sockstat: per-socket drop counts need Linux (SO_MEMINFO)")
}
