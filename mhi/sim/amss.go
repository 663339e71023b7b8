package sim

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"time"

	"github.com/mhistack/mhistack/mhi"
)

// The AMSS image on the emulated flash, and what a bad one does to the
// next boot (docs/FLASHING.md, "A bricked modem").
//
// A modem whose FIREHOSE function has Storage boots the image in the
// "modem" partition of that storage: AMSSSectors sectors from AMSSSector
// of LUN 0. New reads it, as a power-on boot would:
//
//   - nothing there (never written, or erased): the modem boots as
//     without storage;
//   - an image AMSSImage made for this profile: the same;
//   - anything else (another profile's image, a truncated or corrupted
//     one): a bad flash. The firmware crash-loops (Options.CrashLoop,
//     badImageCrashLoop unless set) and the modem enumerates with
//     Options.BadImageID instead of its own PCI ID, as a Foxconn T99W175
//     flashed with the wrong image shows up as Qualcomm's 17cb:0306
//     instead of 105b:e0c3 (docs/RELIABILITY.md, "Crash loop").
//
// Writing a good image through the flash programmer and booting again (a
// new Modem over the same Storage) brings the modem back.
const (
	AMSSLUN     = 0
	AMSSSector  = 256
	AMSSSectors = 16
)

// amssMagic opens an emulated AMSS image: magic, then the body's length
// and CRC-32 (little-endian uint32s), then the body, which names the
// profile it was built for.
const amssMagic = "MHISTACK-AMSS\x00\x00\x01"

const amssHeaderLen = len(amssMagic) + 8

// badImageCrashLoop is how long a bad image runs in AMSS before it
// crashes, unless Options.CrashLoop says otherwise: long enough for the
// host to see mission mode, short enough for five crashes in a test.
const badImageCrashLoop = 50 * time.Millisecond

// defaultBadImageID is Options.BadImageID's default: the Qualcomm SDX55
// ID the T99W175 of the report falls back to.
var defaultBadImageID = mhi.PCIID{Vendor: 0x17cb, Device: 0x0306}

// AMSSImage returns the emulated AMSS image for profile p: what a modem
// of that profile boots (and the flash programmer can write).
func AMSSImage(p *mhi.Profile) []byte {
	body := []byte("mhistack emulated AMSS firmware for " + p.Name + "\n")
	b := make([]byte, 0, amssHeaderLen+len(body))
	b = append(b, amssMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	b = binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(body))
	return append(b, body...)
}

// amssVerdict is what the boot makes of the modem partition.
type amssVerdict int

const (
	amssNone amssVerdict = iota // nothing written: boot as without storage
	amssGood
	amssBad
)

func (v amssVerdict) String() string {
	return [...]string{"none", "good", "bad"}[v]
}

// checkAMSS reads the modem partition of st and judges it for profile p:
// good only if it starts with AMSSImage(p) byte for byte (the boot ROM's
// signature check, in short).
func checkAMSS(st *Storage, p *mhi.Profile) amssVerdict {
	if st == nil || st.LUNs() <= AMSSLUN || st.Sectors(AMSSLUN) < AMSSSector+AMSSSectors {
		return amssNone
	}
	part := make([]byte, AMSSSectors*st.SectorSize())
	if err := st.ReadSectors(AMSSLUN, AMSSSector, part); err != nil {
		return amssBad
	}
	if allBytes(part, st.erasedByte()) {
		return amssNone
	}
	if !bytes.HasPrefix(part, AMSSImage(p)) {
		return amssBad
	}
	return amssGood
}

func allBytes(b []byte, v byte) bool {
	for _, c := range b {
		if c != v {
			return false
		}
	}
	return true
}

// AMSS says what the modem made of its AMSS image at power-on: "none"
// (no storage, or nothing in the modem partition), "good" or "bad".
func (m *Modem) AMSS() string { return m.amss.String() }
