//go:build !(armbe || arm64be || m68k || mips || mips64 || mips64p32 || ppc || ppc64 || s390 || s390x || shbe || sparc || sparc64)

package pci

// bigEndian reports whether the CPU stores words big-endian; device memory
// is little-endian (docs/PROTOCOL.md), so Buffer's word accessors swap
// bytes on such a CPU.
const bigEndian = false
