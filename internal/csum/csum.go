// Package csum computes the Internet checksum (RFC 1071) of RX packets
// faster than gvisor's checksum.Checksum where the CPU allows: with AVX2 it
// sums 64 bytes per loop in vector lanes instead of one 8-byte add-with-carry
// chain. Results are those of checksum.Checksum.
package csum

import (
	"math/bits"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// Checksum returns the 16-bit one's complement sum of b (big-endian words,
// a trailing odd byte padded with zero) added to initial, like
// checksum.Checksum(b, initial), which it falls back to without a vector
// unit or for short buffers.
func Checksum(b []byte, initial uint16) uint16 {
	if !haveVector || len(b) < minVector {
		return checksum.Checksum(b, initial)
	}
	// Sum little-endian words (RFC 1071 §2(B): the sum is byte-order
	// independent, so the byte swap is done once at the end).
	var s uint64
	for len(b) >= 64 {
		n := min(len(b)&^63, maxBlock)
		s += sumVector(&b[0], n)
		b = b[n:]
	}
	for len(b) >= 2 {
		s += uint64(b[0]) | uint64(b[1])<<8
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0])
	}
	// Fold to 16 bits with end-around carries.
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return checksum.Combine(initial, bits.ReverseBytes16(uint16(s)))
}

const (
	// minVector: below this the call and the final reduction cost more
	// than the scalar loop.
	minVector = 128
	// maxBlock bounds one vector call so that its 32-bit lane sums
	// cannot overflow (each lane adds at most 0xFFFF per 64 bytes).
	maxBlock = 1 << 20
)
