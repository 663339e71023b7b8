package mbim

// MS BASE_STATIONS_INFO (MS_BASIC_CONNECT_EXTENSIONS CID 11) in its two
// layouts: MBIMEx 1.0/2.0 (the LTE serving cell is what status reads) and
// MBIMEx 3.0, which adds the system subtype and the NR serving and
// neighbour cells. Layouts: libmbim
// data/mbim-service-ms-basic-connect-extensions.json and
// data/mbim-service-ms-basic-connect-extensions-v3.json ("Base Stations
// Info", MbimCellInfoServingNr, MbimCellInfoNeighboringNr); Microsoft's
// "MB base stations information query support" page and the wwan.h
// WWAN_NR_SERVING_CELLS_INFO / WWAN_NR_NEIGHBOR_CELLS_INFO structures.

import (
	"encoding/binary"
	"math"
)

// BaseStationsQuery is the BASE_STATIONS_INFO query: the most neighbour
// cells of each RAT the host wants (GSM, UMTS, TD-SCDMA, LTE, CDMA, and
// NR from MBIMEx 3.0).
type BaseStationsQuery struct {
	MaxGSM, MaxUMTS, MaxTDSCDMA, MaxLTE, MaxCDMA uint32
	MaxNR                                        uint32 // EncodeV3 only
}

// Encode returns the 20-byte query of MBIMEx 1.0 and 2.0.
func (q *BaseStationsQuery) Encode() []byte {
	return q.encode(20)
}

// EncodeV3 returns the 24-byte query of MBIMEx 3.0 (MaxNR last).
func (q *BaseStationsQuery) EncodeV3() []byte {
	return q.encode(24)
}

func (q *BaseStationsQuery) encode(n int) []byte {
	w := newWriter(n)
	for i, v := range []uint32{q.MaxGSM, q.MaxUMTS, q.MaxTDSCDMA, q.MaxLTE, q.MaxCDMA, q.MaxNR}[:n/4] {
		w.u32(4*i, v)
	}
	return w.bytes()
}

// BaseStationsInfo is the BASE_STATIONS_INFO answer: the serving system,
// its LTE serving cell and, from MBIMEx 3.0, its NR cells. The GSM, UMTS
// and TD-SCDMA serving cells and the non-NR neighbour lists are skipped
// by the parsers and sent empty by the encoders.
type BaseStationsInfo struct {
	// SystemType is the serving system's data class. In the 3.0 layout
	// it is MbimDataClassV3, where bit 6 (DataClass5GNSA's) means any
	// 5G and SystemSubType says which.
	SystemType    DataClass
	SystemSubType DataSubclass    // 3.0 only
	LTE           *LTEServingCell // nil: not on LTE
	// NR and NRNeighbours are the 3.0 layout's NR serving cells (the
	// primary first, as the function lists them) and NR neighbours.
	NR           []NRServingCell
	NRNeighbours []NRNeighbourCell
}

// DataSubclass is MBIMEx 3.0's refinement of the 5G data class (libmbim
// MbimDataSubclass).
type DataSubclass uint32

// Data subclasses.
const (
	DataSubclass5GENDC   DataSubclass = 1 << 0 // EN-DC, option 3
	DataSubclass5GNR     DataSubclass = 1 << 1 // standalone NR, option 2
	DataSubclass5GNEDC   DataSubclass = 1 << 2 // NE-DC, option 4
	DataSubclass5GELTE   DataSubclass = 1 << 3 // eLTE, option 5
	DataSubclass5GNGENDC DataSubclass = 1 << 4 // NGEN-DC, option 7
)

// LTEServingCell is MbimCellInfoServingLte. RSRP (dBm) and RSRQ (dB) are
// signed; Unknown (as int32: −1) means not measured, as do CellID,
// EARFCN, PCI, TAC and TimingAdvance at Unknown.
type LTEServingCell struct {
	ProviderID    string // MCC+MNC
	CellID        uint32
	EARFCN        uint32
	PCI           uint32
	TAC           uint32
	RSRP, RSRQ    int32
	TimingAdvance uint32
}

// NRSignal is an NR cell's measurement as BASE_STATIONS_INFO codes it:
// RSRP 0..126 for −156..−30 dBm in 1 dB steps, RSRQ 0..127 for −43..20.5
// dB and SINR 0..127 for −23..40.5 dB in 0.5 dB steps (Microsoft's
// WWAN_NR_SERVING_CELLS_INFO: "0 to 127 mapped to −156 to −31 dBm, −43 to
// 20 dB, −23 to 40 dB"; the steps are TS 38.133's SS-RSRP, SS-RSRQ and
// SS-SINR reporting ranges). Unknown is "not measured". mbimcli prints
// RSRQ and SINR as n − 43 and n − 23, ignoring the half-dB step.
type NRSignal struct {
	RSRP, RSRQ, SINR uint32
}

// RSRPdBm decodes RSRP; ok is false when it is unknown.
func (s NRSignal) RSRPdBm() (dbm float64, ok bool) {
	if s.RSRP > 126 {
		return 0, false
	}
	return float64(s.RSRP) - 156, true
}

// RSRQdB decodes RSRQ; ok is false when it is unknown.
func (s NRSignal) RSRQdB() (db float64, ok bool) {
	if s.RSRQ > 127 {
		return 0, false
	}
	return float64(s.RSRQ)/2 - 43, true
}

// SINRdB decodes SINR; ok is false when it is unknown.
func (s NRSignal) SINRdB() (db float64, ok bool) {
	if s.SINR > 127 {
		return 0, false
	}
	return float64(s.SINR)/2 - 23, true
}

// CodeNRSignal codes a measured RSRP (dBm), RSRQ (dB) and SINR (dB) for
// NRSignal: the step that holds each value, clamped to the range.
func CodeNRSignal(rsrp, rsrq, sinr float64) NRSignal {
	return NRSignal{
		RSRP: uint32(max(0, min(126, math.Floor(rsrp)+156))),
		RSRQ: uint32(max(0, min(127, math.Floor((rsrq+43)*2)))),
		SINR: uint32(max(0, min(127, math.Floor((sinr+23)*2)))),
	}
}

// NRServingCell is MbimCellInfoServingNr: PCI 0..1007, NR-ARFCN
// 0..3279165, TAC 24 bits, NCI 36 bits, each Unknown (NCI and
// TimingAdvance: UnknownU64) when not available.
type NRServingCell struct {
	ProviderID    string // MCC+MNC
	NCI           uint64
	PCI           uint32
	NRARFCN       uint32
	TAC           uint32
	Signal        NRSignal
	TimingAdvance uint64 // µs
}

// NRNeighbourCell is MbimCellInfoNeighboringNr. CellID is a string here
// (the NCI in decimal, as Windows sends it).
type NRNeighbourCell struct {
	SystemSubType DataSubclass
	ProviderID    string
	CellID        string
	PCI           uint32
	TAC           uint32
	Signal        NRSignal
}

// UnknownU64 is MBIMEx 3.0's "no value" for the NR cells' u64 fields
// (libmbim and mbimcli; Microsoft's text says 0xFFFFFFFF, which a 36-bit
// NCI could hold).
const UnknownU64 uint64 = math.MaxUint64

// Fixed parts: MbimCellInfoServingLte, MbimCellInfoServingNr,
// MbimCellInfoNeighboringNr.
const (
	lteServingSize  = 36
	nrServingSize   = 48
	nrNeighbourSize = 40
)

// baseStationsFixed is the answer's fixed part: SystemType, four serving
// cell (offset, size) pairs, five neighbour list pairs. The 3.0 layout
// adds SystemSubType after SystemType and two NR list pairs at the end.
const (
	baseStationsFixed   = 4 + 4*8 + 5*8
	baseStationsFixedV3 = 8 + 4*8 + 7*8
)

// maxNRCells bounds each NR list a parser accepts: a UE has at most 16
// serving cells (TS 38.331 maxNrofServingCells), and a host asks for
// few neighbours.
const maxNRCells = 32

// Encode returns the MBIMEx 1.0/2.0 answer buffer.
func (b *BaseStationsInfo) Encode() []byte {
	w := newWriter(baseStationsFixed)
	w.u32(0, uint32(b.SystemType))
	b.encodeLTE(w, 4+3*8)
	return w.bytes()
}

// EncodeV3 returns the MBIMEx 3.0 answer buffer. The NR lists are
// ms-struct-arrays: an (offset, size) pair for {u32 count, the cells
// back to back, each its fixed part followed by its own strings, whose
// offsets count from the cell's start}.
func (b *BaseStationsInfo) EncodeV3() []byte {
	w := newWriter(baseStationsFixedV3)
	w.u32(0, uint32(b.SystemType))
	w.u32(4, uint32(b.SystemSubType))
	b.encodeLTE(w, 8+3*8)
	if len(b.NR) > 0 {
		arr := binary.LittleEndian.AppendUint32(nil, uint32(len(b.NR)))
		for _, c := range b.NR {
			cw := newWriter(nrServingSize)
			cw.str(0, c.ProviderID)
			cw.u64(8, c.NCI)
			for i, v := range []uint32{c.PCI, c.NRARFCN, c.TAC, c.Signal.RSRP, c.Signal.RSRQ, c.Signal.SINR} {
				cw.u32(16+4*i, v)
			}
			cw.u64(40, c.TimingAdvance)
			arr = append(arr, cw.bytes()...)
		}
		w.ol(8+4*8+5*8, arr)
	}
	if len(b.NRNeighbours) > 0 {
		arr := binary.LittleEndian.AppendUint32(nil, uint32(len(b.NRNeighbours)))
		for _, c := range b.NRNeighbours {
			cw := newWriter(nrNeighbourSize)
			cw.u32(0, uint32(c.SystemSubType))
			cw.str(4, c.ProviderID)
			cw.str(12, c.CellID)
			for i, v := range []uint32{c.PCI, c.TAC, c.Signal.RSRP, c.Signal.RSRQ, c.Signal.SINR} {
				cw.u32(20+4*i, v)
			}
			arr = append(arr, cw.bytes()...)
		}
		w.ol(8+4*8+6*8, arr)
	}
	return w.bytes()
}

// encodeLTE writes the LTE serving cell, a nested struct whose string
// offset counts from the struct's start, at pair off.
func (b *BaseStationsInfo) encodeLTE(w *writer, off int) {
	c := b.LTE
	if c == nil {
		return
	}
	cw := newWriter(lteServingSize)
	cw.str(0, c.ProviderID)
	for i, v := range []uint32{c.CellID, c.EARFCN, c.PCI, c.TAC, uint32(c.RSRP), uint32(c.RSRQ), c.TimingAdvance} {
		cw.u32(8+4*i, v)
	}
	w.ol(off, cw.bytes())
}

// ParseBaseStationsInfo decodes the MBIMEx 1.0/2.0 answer's system type
// and LTE serving cell.
func ParseBaseStationsInfo(b []byte) (BaseStationsInfo, error) {
	r := newReader(b, "BASE_STATIONS_INFO", baseStationsFixed)
	info := BaseStationsInfo{SystemType: DataClass(r.u32(0))}
	info.LTE = parseLTEServing(r, 4+3*8)
	return info, r.err
}

// ParseBaseStationsInfoV3 decodes the MBIMEx 3.0 answer's system type
// and subtype, LTE serving cell and NR cells.
func ParseBaseStationsInfoV3(b []byte) (BaseStationsInfo, error) {
	r := newReader(b, "BASE_STATIONS_INFO v3", baseStationsFixedV3)
	info := BaseStationsInfo{SystemType: DataClass(r.u32(0)), SystemSubType: DataSubclass(r.u32(4))}
	info.LTE = parseLTEServing(r, 8+3*8)
	info.NR = parseCells(r, 8+4*8+5*8, "NrServingCells", nrServingSize, []int{0}, func(cr *reader) NRServingCell {
		return NRServingCell{ProviderID: cr.str(0, 0, "ProviderId"), NCI: cr.u64(8), PCI: cr.u32(16), NRARFCN: cr.u32(20),
			TAC: cr.u32(24), Signal: NRSignal{RSRP: cr.u32(28), RSRQ: cr.u32(32), SINR: cr.u32(36)}, TimingAdvance: cr.u64(40)}
	})
	info.NRNeighbours = parseCells(r, 8+4*8+6*8, "NrNeighborCells", nrNeighbourSize, []int{4, 12}, func(cr *reader) NRNeighbourCell {
		return NRNeighbourCell{SystemSubType: DataSubclass(cr.u32(0)), ProviderID: cr.str(4, 0, "ProviderId"),
			CellID: cr.str(12, 0, "CellId"), PCI: cr.u32(20), TAC: cr.u32(24),
			Signal: NRSignal{RSRP: cr.u32(28), RSRQ: cr.u32(32), SINR: cr.u32(36)}}
	})
	if r.err != nil {
		return BaseStationsInfo{}, r.err
	}
	return info, nil
}

// parseLTEServing reads the LTE serving cell whose pair is at off (nil
// when absent).
func parseLTEServing(r *reader, off int) *LTEServingCell {
	o, size := r.u32(off), r.u32(off+4)
	if r.err != nil || o == 0 {
		return nil
	}
	cell := r.bytesAt(0, uint64(o), uint64(size), "LteServingCell")
	if r.err != nil {
		return nil
	}
	cr := newReader(cell, r.cid+" LteServingCell", lteServingSize)
	c := &LTEServingCell{ProviderID: cr.str(0, 0, "ProviderId"), CellID: cr.u32(8), EARFCN: cr.u32(12), PCI: cr.u32(16),
		TAC: cr.u32(20), RSRP: int32(cr.u32(24)), RSRQ: int32(cr.u32(28)), TimingAdvance: cr.u32(32)}
	if cr.err != nil {
		r.err = cr.err
		return nil
	}
	return c
}

// parseCells reads the ms-struct-array whose pair is at off: {u32 count,
// count cells}. A cell's strings count from the cell's start and must
// lie inside the array; as libmbim reads these lists, the next cell
// starts after the fixed part and the cell's strings, each padded to 4
// bytes. An absent list (offset 0) or a count of 0 is nil.
// strs are the offsets of the cell's string (offset, size) pairs.
func parseCells[T any](r *reader, off int, what string, fixed int, strs []int, cell func(*reader) T) []T {
	o, size := r.u32(off), r.u32(off+4)
	if r.err != nil || o == 0 {
		return nil
	}
	arr := r.bytesAt(0, uint64(o), uint64(size), what)
	if r.err != nil {
		return nil
	}
	if len(arr) < 4 {
		r.failf("%s of %d bytes, want the count", what, len(arr))
		return nil
	}
	n := binary.LittleEndian.Uint32(arr)
	if n > maxNRCells || uint64(len(arr)) < 4+uint64(n)*uint64(fixed) {
		r.failf("%s count %d in %d bytes", what, n, len(arr))
		return nil
	}
	var cells []T
	p := 4
	for i := range int(n) {
		if len(arr)-p < fixed {
			r.failf("%s cell %d at %d outside %d bytes", what, i, p, len(arr))
			return nil
		}
		cr := newReader(arr[p:], r.cid+" "+what, fixed)
		c := cell(cr)
		if cr.err != nil {
			r.err = cr.err
			return nil
		}
		cells = append(cells, c)
		p += fixed
		for _, so := range strs {
			// str checked that the string lies in the array.
			p += (int(binary.LittleEndian.Uint32(cr.b[so+4:])) + 3) &^ 3
		}
	}
	return cells
}
