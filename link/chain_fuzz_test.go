package link

import (
	"bytes"
	"testing"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
)

// FuzzMHIChain (docs/FRAMING.md §10 item 9, docs/PROTOCOL.md §5.8):
// sequences of DL completions — OVERFLOW, EOT, EOB with device-chosen
// lengths, and channel resets — through the endpoint's chain state
// machine. Every completed frame must be exactly its pieces' bytes in
// order; chains beyond MaxFrame or the piece bound are dropped, never
// delivered; a reset drops the chain in progress; every buffer comes
// back exactly once.
func FuzzMHIChain(f *testing.F) {
	// ops: 3 bytes each — kind (0 EOT, 1 OVERFLOW, 2 EOB, 3 reset) and a
	// little-endian length the device claims.
	f.Add(uint16(4096), []byte{1, 0x00, 0x10, 1, 0x00, 0x10, 0, 0x10, 0x00})                // 2 OVERFLOW + EOT
	f.Add(uint16(3500), []byte{1, 0xAC, 0x0D, 3, 0, 0, 0, 0x40, 0x00})                      // reset mid-chain
	f.Add(uint16(256), bytes.Repeat([]byte{1, 0x00, 0x01}, 300))                            // endless chain
	f.Add(uint16(1500), []byte{2, 0xDC, 0x05, 0, 0xFF, 0xFF, 1, 0x00, 0x00, 0, 0x00, 0x00}) // EOB, overlong EOT, empty pieces
	f.Fuzz(func(t *testing.T, mru uint16, ops []byte) {
		size := max(int(mru)%8192, 16)
		const budget = 4
		maxPieces := (framing.MaxFrame+size-1)/size + 1
		e := &Endpoint{framing: framing.RawIP{}}
		e.rx.init(budget, maxPieces, 1024)
		r := &e.rx

		given := 0
		var want []byte // the chain in progress, as the model sees it
		pieces, over := 0, false
		for i := 0; i+2 < len(ops) && i < 3*2000; i += 3 {
			kind, n := ops[i]%4, int(ops[i+1])|int(ops[i+2])<<8
			if kind == 3 {
				r.dropChain(e)
				want, pieces, over = want[:0], 0, false
				continue
			}
			b := &pci.Buffer{Mem: bytes.Repeat([]byte{byte(i / 3)}, size)}
			given++
			code := mhi.CodeEOT
			switch kind {
			case 1:
				code = mhi.CodeOverflow
			case 2:
				code = mhi.CodeEOB
			}
			k := min(n, size)
			if !over && (pieces == maxPieces || len(want)+k > framing.MaxFrame) {
				over = true
			}
			if !over {
				want = append(want, b.Mem[:k]...)
				pieces++
			}
			tail := r.tail
			e.rxComplete(mhi.Completion{Buf: b, Len: n, Code: code})
			if code == mhi.CodeOverflow {
				if r.tail != tail {
					t.Fatal("an OVERFLOW piece completed a frame")
				}
				continue
			}
			if over {
				if r.tail != tail {
					t.Fatal("an oversize chain was delivered")
				}
			} else {
				if r.tail == tail {
					t.Fatal("a complete chain was not delivered")
				}
				r.decode(e, &r.frames[r.head])
				if !bytes.Equal(r.data, want) {
					t.Fatalf("frame of %d bytes, want %d", len(r.data), len(want))
				}
				r.dropPieces(&r.frames[r.head])
				r.decoded, r.data, r.cursor = false, nil, 0
				r.head = r.next(r.head)
			}
			want, pieces, over = want[:0], 0, false
		}
		r.dropChain(e)
		if len(r.freed) != given {
			t.Fatalf("%d buffers given, %d came back", given, len(r.freed))
		}
		seen := map[*pci.Buffer]bool{}
		for _, b := range r.freed {
			if seen[b] {
				t.Fatal("a buffer came back twice")
			}
			seen[b] = true
		}
	})
}
