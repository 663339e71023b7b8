//go:build linux

package vfio

import (
	"errors"
	"testing"

	"github.com/mhistack/mhistack/mhi/pci"
)

func TestPickIOVAStaysInRangesAndBelowLimit(t *testing.T) {
	qemu := []IOVARange{{0, 0xfedfffff}, {0xfef00000, 0x7fffffffff}}
	for _, c := range []struct {
		name                     string
		ranges                   []IOVARange
		size, align, base, limit uint64
		want                     uint64
		err                      bool
	}{
		{"first fit above base", qemu, 16 << 20, 2 << 20, 1 << 20, pci.Limit4G, 2 << 20, false},
		{"unrestricted", nil, 4096, 4096, 1 << 20, pci.Limit4G, 1 << 20, false},
		{"skips the MSI hole", qemu, 2 << 20, 4096, 0xfed00000, pci.Limit4G, 0xfef00000, false},
		{"edu 28-bit mask", qemu, 16 << 20, 2 << 20, 1 << 20, 1 << 28, 2 << 20, false},
		{"too big below 4G", []IOVARange{{0, 0xfedfffff}}, 8 << 30, 4096, 0, pci.Limit4G, 0, true},
		{"window ends exactly at the limit", []IOVARange{{0xfff00000, 0xffffffff}}, 1 << 20, 4096, 0, pci.Limit4G, 0xfff00000, false},
		{"range above 4G only", []IOVARange{{1 << 33, 1 << 34}}, 4096, 4096, 0, pci.Limit4G, 0, true},
	} {
		got, err := pickIOVA(c.ranges, c.size, c.align, c.base, c.limit)
		if c.err {
			if !errors.Is(err, pci.ErrNoIOVASpace) {
				t.Errorf("%s: got %#x, %v; want ErrNoIOVASpace", c.name, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %#x, %v; want %#x", c.name, got, err, c.want)
		}
	}
}

func TestMemlockErrorSaysWhatToDo(t *testing.T) {
	err := memlockError("pinning", 16<<20, errors.New("cannot allocate memory"))
	if errors.Is(err, ErrMemlock) {
		t.Errorf("a non-errno error became ErrMemlock: %v", err)
	}
}
