package csum_test

import (
	"math/rand/v2"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"

	"github.com/mhistack/mhistack/internal/csum"
)

// same reports whether two one's complement sums are equal (0x0000 and
// 0xFFFF are both zero).
func same(a, b uint16) bool { return a == b || (a == 0 && b == 0xffff) || (a == 0xffff && b == 0) }

func TestChecksumMatchesGVisor(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 70000)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	// Every length and offset near the vector boundaries, then random ones,
	// and buffers of all 0xFF bytes (the largest lane sums).
	check := func(b []byte, init uint16) {
		t.Helper()
		if got, want := csum.Checksum(b, init), checksum.Checksum(b, init); !same(got, want) {
			t.Fatalf("len %d init %#x: %#x, gVisor %#x", len(b), init, got, want)
		}
	}
	for n := 0; n < 600; n++ {
		for off := range 3 {
			check(buf[off:off+n], uint16(r.Uint32()))
		}
	}
	for range 2000 {
		off, n := r.IntN(1000), r.IntN(65536)
		check(buf[off:off+n], uint16(r.Uint32()))
	}
	ones := make([]byte, 65535)
	for i := range ones {
		ones[i] = 0xff
	}
	for _, n := range []int{64, 128, 1500, 65534, 65535} {
		check(ones[:n], 0)
		check(ones[:n], 0xffff)
	}
}

func FuzzChecksum(f *testing.F) {
	f.Add(make([]byte, 200), uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, init uint16) {
		if got, want := csum.Checksum(b, init), checksum.Checksum(b, init); !same(got, want) {
			t.Fatalf("len %d init %#x: %#x, gVisor %#x", len(b), init, got, want)
		}
	})
}

func BenchmarkChecksum(b *testing.B) {
	buf := make([]byte, 1480)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	b.Run("csum", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			csum.Checksum(buf, 0)
		}
	})
	b.Run("gvisor", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			checksum.Checksum(buf, 0)
		}
	})
}
