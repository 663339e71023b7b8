package vfiouser

import (
	"bytes"
	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
	"math/rand/v2"
	"syscall"
	"testing"
)

// What QEMU's vfio-user client sends for a guest behind intel-iommu with
// caching-mode=on: every page the guest's IOMMU maps arrives as its own
// 4 KiB DMA_MAP (guest pages are scattered in RAM, so nothing merges),
// and an IOTLB invalidation arrives as one DMA_UNMAP of a large
// power-of-two range over whatever is mapped inside. The table must hold
// tens of thousands of page windows, DMA must cross page windows, and the
// range unmap must remove them all so that a second process can map the
// same IOVAs again. Before the fix the table refused map 4097 (ENOSPC),
// a DMA over two page windows faulted, and the range unmap was ENOENT.
func TestVIOMMUPageMapsAndRangeUnmapsFollowType1(t *testing.T) {
	r := newRig(t)
	c, h := r.cl, r.model.Host
	c.negotiate()
	c.enableDevice()
	const (
		pages     = 20000
		filePages = 32768 // 128 MiB of sparse guest RAM
		base      = 0x600000
	)
	fd, ram := memfd(t, filePages*vuwire.PageSize)
	// Page i of the IOVA range is file page (i*7919) mod filePages: no
	// two IOVA neighbours are file neighbours. Half the pages arrive in
	// descending order, the rest ascending, so inserts land anywhere.
	filePage := func(i int) uint64 { return uint64(i*7919%filePages) * vuwire.PageSize }
	order := make([]int, 0, pages)
	for i := pages/2 - 1; i >= 0; i-- {
		order = append(order, i)
	}
	for i := pages / 2; i < pages; i++ {
		order = append(order, i)
	}
	for _, i := range order {
		c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, filePage(i), base+uint64(i)*vuwire.PageSize, vuwire.PageSize), fd)
	}
	if st := r.srv.Stats(); st.DMAWindows != pages {
		t.Fatalf("%d windows after %d scattered page maps", st.DMAWindows, pages)
	}

	// A 32 KiB buffer over nine page windows (not page-aligned).
	src := make([]byte, 32<<10)
	for i := range src {
		src[i] = byte(i * 31)
	}
	iova := uint64(base + 9999*vuwire.PageSize + 100)
	if err := h.DMAWrite(iova, src); err != nil {
		t.Fatalf("DMA write over page windows: %v", err)
	}
	for off := 0; off < len(src); {
		a := iova + uint64(off)
		page := int((a - base) / vuwire.PageSize)
		in := a % vuwire.PageSize
		n := min(int(vuwire.PageSize-in), len(src)-off)
		if got := ram[filePage(page)+in : filePage(page)+in+uint64(n)]; !bytes.Equal(got, src[off:off+n]) {
			t.Fatalf("IOVA %#x: guest page %d does not hold the written bytes", a, page)
		}
		off += n
	}
	back := make([]byte, len(src))
	if err := h.DMARead(iova, back); err != nil || !bytes.Equal(back, src) {
		t.Fatalf("DMA read over page windows: %v, equal %v", err, bytes.Equal(back, src))
	}
	if err := h.DMAWrite32(base+123*vuwire.PageSize+vuwire.PageSize-4, 7); err != nil {
		t.Fatal(err)
	}
	r.expectFault(t, h.DMARead(base+pages*vuwire.PageSize-8, back[:16]), "unmapped") // runs off the end

	// The guest's invalidations: [0, 2 GiB) then [2 GiB, 3 GiB).
	rep := c.call(vuwire.CmdDMAUnmap, unmapReq(0, 0, 0x80000000))
	if string(rep) != string(unmapReq(0, 0, 0x80000000)) {
		t.Errorf("DMA_UNMAP reply %x does not echo the request", rep)
	}
	c.call(vuwire.CmdDMAUnmap, unmapReq(0, 0x80000000, 0x40000000)) // nothing inside: still success
	// The top half of the 64-bit space, ending exactly at 2^64 (QEMU
	// sends it on unplug): it answered EINVAL before.
	c.call(vuwire.CmdDMAUnmap, unmapReq(0, 1<<63, 1<<63))
	if _, errno := c.try(vuwire.CmdDMAUnmap, unmapReq(0, 1<<63, 1<<63+1)); errno != syscall.EINVAL {
		t.Errorf("a range past 2^64: errno %v, want EINVAL", errno)
	}
	st := r.srv.Stats()
	if st.DMAWindows != 0 || st.DMAUnmapped != pages {
		t.Fatalf("after the range unmaps: %d windows left, %d unmapped (want 0, %d)", st.DMAWindows, st.DMAUnmapped, pages)
	}
	r.expectFault(t, h.DMARead(iova, back[:8]), "unmapped")
	if n := r.srv.dma.fileMaps(); n != 0 {
		t.Errorf("%d file mappings left after every window is gone", n)
	}

	// The next process on the device maps the same IOVAs again.
	for i := range 64 {
		if _, errno := c.try(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, filePage(i), base+uint64(i)*vuwire.PageSize, vuwire.PageSize), fd); errno != 0 {
			t.Fatalf("remap of page %d after the range unmap: %v", i, errno)
		}
	}
	if err := h.DMARead(base, back); err != nil {
		t.Error(err)
	}
}

// Page maps that continue each other in IOVA and in the file merge into one
// window (what a guest without an IOMMU or with huge contiguous buffers
// produces), from either side; an unmap in the middle splits the window,
// and DMA over the hole is refused.
func TestContiguousPageMapsMergeAndAnUnmapSplitsThem(t *testing.T) {
	r := newRig(t)
	c, h := r.cl, r.model.Host
	c.negotiate()
	c.enableDevice()
	fd, ram := memfd(t, 64*vuwire.PageSize)
	for i := uint64(0); i < 16; i++ { // ascending
		c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, i*vuwire.PageSize, 0x10000+i*vuwire.PageSize, vuwire.PageSize), fd)
	}
	for i := uint64(31); i >= 17; i-- { // descending, then the gap
		c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, i*vuwire.PageSize, 0x10000+i*vuwire.PageSize, vuwire.PageSize), fd)
	}
	if n := r.srv.Stats().DMAWindows; n != 2 {
		t.Fatalf("%d windows, want 2", n)
	}
	c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, 16*vuwire.PageSize, 0x10000+16*vuwire.PageSize, vuwire.PageSize), fd)
	// A read-only page and one at another file offset do not merge.
	c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead, 32*vuwire.PageSize, 0x10000+32*vuwire.PageSize, vuwire.PageSize), fd)
	c.call(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead|vuwire.DMAFlagWrite, 40*vuwire.PageSize, 0x10000+33*vuwire.PageSize, vuwire.PageSize), fd)
	if n := r.srv.Stats().DMAWindows; n != 3 {
		t.Fatalf("%d windows, want 3 (pages 0-31 merged, the read-only page, the far page)", n)
	}
	if _, errno := c.try(vuwire.CmdDMAMap, mapReq(vuwire.DMAFlagRead, 0, 0x10000+5*vuwire.PageSize, 2*vuwire.PageSize), fd); errno != syscall.EEXIST {
		t.Errorf("map over a merged window: errno %v, want EEXIST", errno)
	}
	buf := bytes.Repeat([]byte{0xa5}, 32*vuwire.PageSize)
	if err := h.DMAWrite(0x10000, buf); err != nil || !bytes.Equal(ram[:32*vuwire.PageSize], buf) {
		t.Fatalf("DMA over the merged window: %v", err)
	}

	c.call(vuwire.CmdDMAUnmap, unmapReq(0, 0x10000+8*vuwire.PageSize, vuwire.PageSize))
	if n := r.srv.Stats().DMAWindows; n != 4 {
		t.Fatalf("%d windows after unmapping a middle page, want 4", n)
	}
	r.expectFault(t, h.DMARead(0x10000+8*vuwire.PageSize, buf[:4]), "unmapped")
	r.expectFault(t, h.DMARead(0x10000+7*vuwire.PageSize, buf[:2*vuwire.PageSize]), "unmapped")
	if err := h.DMARead(0x10000+9*vuwire.PageSize, buf[:23*vuwire.PageSize]); err != nil {
		t.Errorf("the tail of the split window: %v", err)
	}
	if err := h.DMAWrite(0x10000+7*vuwire.PageSize, buf[:vuwire.PageSize]); err != nil {
		t.Errorf("the head of the split window: %v", err)
	}
	r.expectFault(t, h.DMAWrite(0x10000+31*vuwire.PageSize, buf[:2*vuwire.PageSize]), reasonReadOnly)
	c.call(vuwire.CmdDMAUnmap, unmapReq(vuwire.DMAUnmapAll, 0, 0))
	if r.srv.dma.fileMaps() != 0 || r.srv.Stats().DMAWindows != 0 {
		t.Error("UNMAP_ALL left windows or file mappings")
	}
}

// The window store against a page bitmap under random maps and range
// unmaps: the same coverage, sorted disjoint windows, no two that should
// have merged, and accesses allowed exactly where every page is mapped.
func TestDMATableMatchesAPageModelUnderRandomMapsAndUnmaps(t *testing.T) {
	const pages = 4096
	rng := rand.New(rand.NewPCG(1, 2))
	var tb dmaTable
	var mapped [pages]bool
	for op := range 20000 {
		a := rng.IntN(pages)
		n := 1 + rng.IntN(min(pages-a, 1+rng.IntN(64)))
		lo, hi := uint64(a)*vuwire.PageSize, uint64(a+n)*vuwire.PageSize
		if rng.IntN(3) > 0 {
			free := true
			for p := a; p < a+n; p++ {
				free = free && !mapped[p]
			}
			errno := tb.mapWindow(mapping{iova: lo, size: hi - lo, writable: true}, -1)
			if free != (errno == 0) || (!free && errno != syscall.EEXIST) {
				t.Fatalf("op %d: map pages [%d,%d): errno %v, free %v", op, a, a+n, errno, free)
			}
			if free {
				for p := a; p < a+n; p++ {
					mapped[p] = true
				}
			}
		} else {
			if _, errno := tb.unmapRange(lo, hi); errno != 0 {
				t.Fatalf("op %d: unmap: %v", op, errno)
			}
			for p := a; p < a+n; p++ {
				mapped[p] = false
			}
		}
		if op%97 != 0 {
			continue
		}
		var got [pages]bool
		var prev *mapping
		tb.maps.each(func(m *mapping) {
			if m.size == 0 || m.iova%vuwire.PageSize != 0 || m.size%vuwire.PageSize != 0 || m.end() > pages*vuwire.PageSize {
				t.Fatalf("op %d: bad window %+v", op, *m)
			}
			if prev != nil && (prev.end() > m.iova || mergeable(prev, m)) {
				t.Fatalf("op %d: windows %+v and %+v overlap or should have merged", op, *prev, *m)
			}
			for p := m.iova / vuwire.PageSize; p < m.end()/vuwire.PageSize; p++ {
				got[p] = true
			}
			prev = m
		})
		if got != mapped {
			t.Fatalf("op %d: the table's coverage differs from the page model", op)
		}
		// No descriptor: the access is refused at its first byte, as
		// reasonNoFD when that page is mapped, else "unmapped".
		_, reason := tb.check(lo, hi-lo, false, false)
		if want := map[bool]string{true: reasonNoFD, false: "unmapped"}[mapped[a]]; reason != want {
			t.Fatalf("op %d: check [%d,%d) = %q, want %q", op, a, a+n, reason, want)
		}
	}
}

// fileMaps returns how many client files the table has mapped.
func (t *dmaTable) fileMaps() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.files)
}
