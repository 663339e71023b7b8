package sim

import (
	"errors"
	"fmt"

	"github.com/mhistack/mhistack/mhi"
)

// maxRingBytes bounds the rings the device accepts from a context. The
// largest pci_generic ring has 2048 elements (32 KiB); a host that claims
// more is almost certainly handing us garbage, and every walk over a ring
// is bounded by its element count.
const maxRingBytes = 1 << 20

// errRP reports a context rp or wp outside its ring.
var errRP = errors.New("ring pointer outside the ring")

// ring is the geometry of a ring in host memory, taken from a context
// (§2): rbase and rlen in bytes. Pointers into it are IOVAs, never indexes.
type ring struct {
	base, size uint64 // bytes
	n          uint64 // elements
}

// newRing validates rbase/rlen from an untrusted context. Power-of-two
// lengths are what the host allocates (§2, pitfall 6) but the device does
// not need them, so they are not required here.
func newRing(base, rlen uint64) (ring, error) {
	switch {
	case rlen == 0:
		return ring{}, fmt.Errorf("zero-length ring at %#x", base)
	case rlen%mhi.ElementSize != 0:
		return ring{}, fmt.Errorf("ring length %#x is not a multiple of 16", rlen)
	case rlen > maxRingBytes:
		return ring{}, fmt.Errorf("ring length %#x exceeds %#x", rlen, maxRingBytes)
	case base%mhi.ElementSize != 0:
		return ring{}, fmt.Errorf("ring base %#x is not 16-byte aligned", base)
	case base >= 1<<32 || base+rlen > 1<<32:
		return ring{}, fmt.Errorf("ring [%#x,%#x) leaves the 32-bit DMA window", base, base+rlen)
	}
	return ring{base: base, size: rlen, n: rlen / mhi.ElementSize}, nil
}

// contains reports whether p is an element pointer of the ring: inside it
// and 16-byte aligned (the same check the host makes on device pointers,
// §10 pitfall 4).
func (r ring) contains(p uint64) bool {
	return p >= r.base && p < r.base+r.size && (p-r.base)%mhi.ElementSize == 0
}

func (r ring) end() uint64 { return r.base + r.size }

// next returns the element after p, wrapping.
func (r ring) next(p uint64) uint64 {
	p += mhi.ElementSize
	if p >= r.end() {
		return r.base
	}
	return p
}

func (r ring) index(p uint64) uint64 { return (p - r.base) / mhi.ElementSize }

// pending returns how many elements lie in [rp, wp), wrapping.
func (r ring) pending(rp, wp uint64) uint64 {
	if wp >= rp {
		return (wp - rp) / mhi.ElementSize
	}
	return r.n - (rp-wp)/mhi.ElementSize
}

// eventSpace is the EP's free-space rule for an event ring (§5.7, ep/ring.c):
// the device owns rp, the host owns wp, and one slot always stays empty.
func (r ring) eventSpace(rp, wp uint64) uint64 {
	ri, wi := r.index(rp), r.index(wp)
	if ri < wi {
		return wi - ri - 1
	}
	return r.n - ri + wi - 1
}

// treCacheLen is how many ring elements one DMA read fetches.
const treCacheLen = 32

// treCache holds a window of elements read from a host ring in one DMA
// (elements in [rp, wp) are immutable until the device completes them,
// so caching them is safe). It is reused, so steady-state fetching does
// not allocate.
type treCache struct {
	at  uint64 // IOVA of the first cached element
	n   uint64 // cached elements
	buf [treCacheLen * mhi.ElementSize]byte
}

func (c *treCache) invalidate() { c.n = 0 }

// fetch returns the element at rp, reading up to treCacheLen elements
// toward wp (without wrapping) when rp is not cached. rp != wp and both lie
// in r.
func (c *treCache) fetch(h dmaReader, r ring, rp, wp uint64) (mhi.Element, error) {
	if c.n == 0 || rp < c.at || rp >= c.at+c.n*mhi.ElementSize {
		n := r.pending(rp, wp)
		if toEnd := (r.end() - rp) / mhi.ElementSize; n > toEnd {
			n = toEnd
		}
		n = min(n, treCacheLen)
		if err := h.DMARead(rp, c.buf[:n*mhi.ElementSize]); err != nil {
			c.n = 0
			return mhi.Element{}, err
		}
		c.at, c.n = rp, n
	}
	off := rp - c.at
	return mhi.DecodeElement(c.buf[off : off+mhi.ElementSize]), nil
}

// dmaReader is the part of vpci.Host the cache needs.
type dmaReader interface {
	DMARead(iova uint64, p []byte) error
}

// ctxWords reads a 44-byte context word by word with 32-bit DMA reads: the
// host may be storing a ring pointer in it concurrently with Store32, and a
// plain copy would race with that (and could tear a word).
func ctxRead(h interface {
	DMARead32(iova uint64) (uint32, error)
}, iova uint64) (mhi.Context, error) {
	var w [mhi.ContextSize / 4]uint32
	for i := range w {
		v, err := h.DMARead32(iova + uint64(4*i))
		if err != nil {
			return mhi.Context{}, err
		}
		w[i] = v
	}
	q := func(i int) uint64 { return uint64(w[i+1])<<32 | uint64(w[i]) }
	return mhi.Context{
		W0: w[0], W1: w[1], W2: w[2],
		RBase: q(mhi.CtxRBase / 4), RLen: q(mhi.CtxRLen / 4),
		RP: q(mhi.CtxRP / 4), WP: q(mhi.CtxWP / 4),
	}, nil
}
