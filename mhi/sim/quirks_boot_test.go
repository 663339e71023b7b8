package sim

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
)

// TestBHIeLERefusesABigEndianVectorTable: with bhie-le the device reads
// the vector table little-endian and fails a download whose table was
// written big-endian (Linux boot.c "Fix endianness of BHI vector table")
// with TXVECSTATUS error and a violation; the same table little-endian
// goes through.
func TestBHIeLERefusesABigEndianVectorTable(t *testing.T) {
	for _, tt := range []struct {
		name  string
		order binary.ByteOrder
		want  uint32
	}{
		{"big-endian", binary.BigEndian, mhi.BHIEStatusError},
		{"little-endian", binary.LittleEndian, mhi.BHIEStatusXferDone},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t, testProfile(), Options{Boot: BootPBL, SBLTime: time.Hour, Quirks: []Quirk{QuirkBHIeLE}})
			pblBoot(h, make([]byte, 64))
			h.waitReady()
			seg := h.alloc(1000, 8)
			table := h.alloc(16, 16)
			tt.order.PutUint64(table.Mem, seg.IOVA)
			tt.order.PutUint64(table.Mem[8:], uint64(seg.Len()))
			bhie := uint64(h.r32(mhi.RegBHIEOFF))
			h.w64(bhie+mhi.BHIETxVecAddrLow, table.IOVA)
			h.w32(bhie+mhi.BHIETxVecSize, uint32(table.Len()))
			h.w32(bhie+mhi.BHIETxVecDB, 0x77)
			h.waitFor("TXVECSTATUS", func() bool { return h.r32(bhie+mhi.BHIETxVecStatus)>>30 != 0 })
			if v := h.r32(bhie + mhi.BHIETxVecStatus); v != tt.want<<30|0x77 {
				t.Fatalf("TXVECSTATUS %#x, want status %d", v, tt.want)
			}
			if tt.want != mhi.BHIEStatusError {
				return // close fails the test on any violation
			}
			select {
			case err := <-h.violations:
				var v *Violation
				if !errors.As(err, &v) || v.Rule != ruleBHIeLE || !strings.Contains(v.Detail, "byte-swapped") {
					t.Errorf("violation %v, want the byte-swapped vector table", err)
				}
			default:
				t.Error("no violation for a big-endian vector table")
			}
		})
	}
}
