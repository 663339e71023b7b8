package vfiouser

import "sort"

// windowChunk is how many windows one chunk of the table holds at most.
// Inserting or removing in the middle moves at most this many entries.
const windowChunk = 128

// windows is the DMA table's ordered store: disjoint windows sorted by
// IOVA in chunks of at most windowChunk, so that a lookup is two binary
// searches and an insert or removal anywhere costs a chunk's worth of
// copying, whatever order tens of thousands of page maps arrive in.
type windows struct {
	chunks [][]mapping
	n      int
}

// pos addresses one window: chunk c, entry k. c == len(chunks) is the end.
type pos struct{ c, k int }

func (w *windows) len() int          { return w.n }
func (w *windows) valid(p pos) bool  { return p.c < len(w.chunks) }
func (w *windows) at(p pos) *mapping { return &w.chunks[p.c][p.k] }
func (w *windows) end() pos          { return pos{c: len(w.chunks)} }

// next returns the position after p.
func (w *windows) next(p pos) pos {
	if p.k+1 < len(w.chunks[p.c]) {
		return pos{p.c, p.k + 1}
	}
	return pos{c: p.c + 1}
}

// prev returns the position before p (which may be the end).
func (w *windows) prev(p pos) (pos, bool) {
	if p.k > 0 {
		return pos{p.c, p.k - 1}, true
	}
	if p.c == 0 {
		return pos{}, false
	}
	return pos{p.c - 1, len(w.chunks[p.c-1]) - 1}, true
}

// seek returns the first window ending after iova (the one holding iova,
// if any), or the end.
func (w *windows) seek(iova uint64) pos {
	c := sort.Search(len(w.chunks), func(i int) bool {
		ch := w.chunks[i]
		return ch[len(ch)-1].end() > iova
	})
	if c == len(w.chunks) {
		return w.end()
	}
	ch := w.chunks[c]
	return pos{c, sort.Search(len(ch), func(i int) bool { return ch[i].end() > iova })}
}

// insert puts m before p, which must keep the order.
func (w *windows) insert(p pos, m mapping) {
	w.n++
	// Before the first entry of a chunk, or at the end: append to the
	// chunk before when it has room (ascending maps append).
	if p.k == 0 && p.c > 0 && len(w.chunks[p.c-1]) < windowChunk {
		w.chunks[p.c-1] = append(w.chunks[p.c-1], m)
		return
	}
	if p.c == len(w.chunks) {
		ch := make([]mapping, 1, windowChunk)
		ch[0] = m
		w.chunks = append(w.chunks, ch)
		return
	}
	if len(w.chunks[p.c]) == windowChunk {
		// Split the full chunk in two halves.
		ch := w.chunks[p.c]
		hi := make([]mapping, windowChunk/2, windowChunk)
		copy(hi, ch[windowChunk/2:])
		clear(ch[windowChunk/2:])
		w.chunks = append(w.chunks, nil)
		copy(w.chunks[p.c+2:], w.chunks[p.c+1:])
		w.chunks[p.c] = ch[:windowChunk/2]
		w.chunks[p.c+1] = hi
		if p.k >= windowChunk/2 {
			p = pos{p.c + 1, p.k - windowChunk/2}
		}
	}
	ch := append(w.chunks[p.c], mapping{})
	copy(ch[p.k+1:], ch[p.k:])
	ch[p.k] = m
	w.chunks[p.c] = ch
}

// remove deletes count windows from p on.
func (w *windows) remove(p pos, count int) {
	w.n -= count
	for count > 0 {
		ch := w.chunks[p.c]
		k := min(count, len(ch)-p.k)
		copy(ch[p.k:], ch[p.k+k:])
		clear(ch[len(ch)-k:]) // drop the file references for the GC
		ch = ch[:len(ch)-k]
		count -= k
		if len(ch) == 0 {
			copy(w.chunks[p.c:], w.chunks[p.c+1:])
			w.chunks[len(w.chunks)-1] = nil
			w.chunks = w.chunks[:len(w.chunks)-1]
			continue
		}
		w.chunks[p.c] = ch
		p = pos{c: p.c + 1}
	}
}

// each calls f for every window in order.
func (w *windows) each(f func(*mapping)) {
	for _, ch := range w.chunks {
		for i := range ch {
			f(&ch[i])
		}
	}
}
