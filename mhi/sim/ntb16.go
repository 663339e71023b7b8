package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A minimal MBIM NTB16 codec (mbim-qmap-qmi.md §3, mhi-protocol.md §7.2):
// just what the emulated modem needs to answer on IP_HW0_MBIM, where
// Linux's mhi_wwan_mbim sends one datagram per NTB and accepts any number
// per NTB on DL. The full codec (NTB32, aggregation, DSS) is link/mbim's.
const (
	nth16Sig    = 0x484D434E // "NCMH"
	nth16Len    = 12         // NTH16: sig, wHeaderLength, wSequence, wBlockLength, wNdpIndex
	ndp16IPS    = 0x00535049 // "IPS" + session id in the 4th byte
	ndp16Min    = 0x10       // USB_CDC_NCM_NDP16_LENGTH_MIN: header + one entry + terminator
	ndp16Header = 8          // sig, wLength, wNextNdpIndex
	// ntb16Overhead is what one-datagram framing adds: NTH16, the NDP16
	// header and two datagram pointers (the datagram and the {0,0} end),
	// so the datagram starts at 0x1C as in mbim_tx_fixup.
	ntb16Overhead = nth16Len + ndp16Header + 2*4
)

// errNTB reports a malformed NTB.
var errNTB = errors.New("malformed NTB16")

// parseNTB16 calls fn for every datagram of every IPS NDP of the NTB in b,
// with the NDP's session id. Datagrams alias b. It checks what Linux's
// mhi_mbim_rx checks, and bounds the NDP walk (the kernel's own walk has
// no loop guard, §3.2). Non-IPS NDPs (DSS) are skipped.
func parseNTB16(b []byte, fn func(session uint8, dgram []byte)) error {
	le := binary.LittleEndian
	if len(b) < nth16Len+ndp16Header {
		return fmt.Errorf("%w: %d bytes", errNTB, len(b))
	}
	if sig := le.Uint32(b); sig != nth16Sig {
		return fmt.Errorf("%w: NTH16 signature %#08x", errNTB, sig)
	}
	if hl := le.Uint16(b[4:]); hl != nth16Len {
		return fmt.Errorf("%w: wHeaderLength %d", errNTB, hl)
	}
	// wBlockLength may be 0 ("not given"); otherwise it bounds the NTB.
	if bl := int(le.Uint16(b[8:])); bl != 0 {
		if bl > len(b) || bl < nth16Len+ndp16Header {
			return fmt.Errorf("%w: wBlockLength %d for a %d-byte transfer", errNTB, bl, len(b))
		}
		b = b[:bl]
	}
	ndp := int(le.Uint16(b[10:]))
	for walked := 0; ndp != 0; walked++ {
		// Each NDP takes at least ndp16Min bytes, so a chain longer
		// than that many is a loop.
		if walked > len(b)/ndp16Min {
			return fmt.Errorf("%w: NDP chain loops", errNTB)
		}
		if ndp < nth16Len || ndp+ndp16Header > len(b) {
			return fmt.Errorf("%w: NDP index %#x", errNTB, ndp)
		}
		sig, n := le.Uint32(b[ndp:]), int(le.Uint16(b[ndp+4:]))
		if n < ndp16Min || n > len(b)-ndp {
			return fmt.Errorf("%w: NDP at %#x has wLength %d", errNTB, ndp, n)
		}
		if sig&0x00FFFFFF == ndp16IPS {
			for e := ndp + ndp16Header; e+4 <= ndp+n; e += 4 {
				idx, dl := int(le.Uint16(b[e:])), int(le.Uint16(b[e+2:]))
				if idx == 0 || dl == 0 {
					break
				}
				if idx+dl > len(b) {
					return fmt.Errorf("%w: datagram [%#x,+%d) beyond the block", errNTB, idx, dl)
				}
				fn(uint8(sig>>24), b[idx:idx+dl])
			}
		}
		ndp = int(le.Uint16(b[ndp+6:]))
	}
	return nil
}

// appendNTB16 appends to dst an NTB16 holding one datagram for session,
// laid out as mhi_wwan_mbim's TX (§3.2): NTH16, one NDP16 at 12 with the
// datagram pointer and the terminator, the datagram at 0x1C.
func appendNTB16(dst []byte, seq uint16, session uint8, dgram []byte) []byte {
	le := binary.LittleEndian
	start := len(dst)
	dst = append(dst, make([]byte, ntb16Overhead)...)
	h := dst[start:]
	le.PutUint32(h[0:], nth16Sig)
	le.PutUint16(h[4:], nth16Len)
	le.PutUint16(h[6:], seq)
	le.PutUint16(h[8:], uint16(ntb16Overhead+len(dgram)))
	le.PutUint16(h[10:], nth16Len)
	n := h[nth16Len:]
	le.PutUint32(n[0:], ndp16IPS|uint32(session)<<24)
	le.PutUint16(n[4:], ndp16Min)
	le.PutUint16(n[6:], 0)
	le.PutUint16(n[8:], ntb16Overhead)
	le.PutUint16(n[10:], uint16(len(dgram)))
	// n[12:16] is the {0,0} terminator, already zero.
	return append(dst, dgram...)
}
