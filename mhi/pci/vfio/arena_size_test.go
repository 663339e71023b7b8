//go:build linux

package vfio

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/mhi/pci"
)

func TestArenaSizeHasHeadroomInWholeHugepages(t *testing.T) {
	for _, need := range []int{0, 1, 19 << 20, 64 << 20} {
		got := ArenaSize(need)
		if got < need+need/8+1<<20 || got%hugePageSize != 0 || got-(need+need/8+1<<20) >= hugePageSize {
			t.Errorf("ArenaSize(%d) = %d", need, got)
		}
	}
}

// The arena is sized by DMASizeFor from the IDs read at Open, before it
// is mapped.
func TestDMASizeForSizesTheArenaFromTheIDs(t *testing.T) {
	k, opts := installFakeKernel(t)
	var seen pci.Info
	opts.DMASizeFor = func(i pci.Info) int { seen = i; return 3 << 20 }
	d, err := Open("0000:01:00.0", opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer d.Close()
	if seen.Vendor != fakeVendorID || seen.Device != fakeDeviceID {
		t.Errorf("DMASizeFor saw %v", seen)
	}
	if a := d.Arena(); a.Size != 3<<20 || k.maps[a.IOVA] != a.Size {
		t.Errorf("arena %+v, IOMMU maps %v; want 3 MiB mapped", a, k.maps)
	}
}

func TestMemlockErrorSaysTheSizeAndTheLimitToSet(t *testing.T) {
	err := memlockError("pinning the DMA arena for the IOMMU", 20<<20, unix.ENOMEM)
	msg := err.Error()
	for _, want := range []string{"20480 KiB", "RLIMIT_MEMLOCK", "ulimit -l 40960", "LimitMEMLOCK=40960K", "CAP_IPC_LOCK"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}
