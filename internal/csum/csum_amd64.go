package csum

import "golang.org/x/sys/cpu"

var haveVector = cpu.X86.HasAVX2

// sumVector returns the sum of the little-endian 16-bit words of the n
// bytes at p; n is a multiple of 64 and at most maxBlock.
//
//go:noescape
func sumVector(p *byte, n int) uint64
