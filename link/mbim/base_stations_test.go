package mbim_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/mhistack/mhistack/link/mbim"
)

// nrBaseStations is an EN-DC answer in the 3.0 layout: LTE B3, two NR
// serving cells (n78 measured, a second carrier not) and a neighbour.
func nrBaseStations() *mbim.BaseStationsInfo {
	return &mbim.BaseStationsInfo{SystemType: mbim.DataClass5GNSA, SystemSubType: mbim.DataSubclass5GENDC,
		LTE: &mbim.LTEServingCell{ProviderID: "00101", CellID: 1, EARFCN: 1300, PCI: 101, TAC: 7, RSRP: -95, RSRQ: -11, TimingAdvance: mbim.Unknown},
		NR: []mbim.NRServingCell{
			{ProviderID: "00101", NCI: 0x123456789, PCI: 7, NRARFCN: 636666, TAC: 7, Signal: mbim.CodeNRSignal(-85, -11, 18), TimingAdvance: 3},
			{ProviderID: "001010", NCI: mbim.UnknownU64, PCI: 8, NRARFCN: 650000, TAC: mbim.Unknown,
				Signal: mbim.NRSignal{RSRP: mbim.Unknown, RSRQ: mbim.Unknown, SINR: mbim.Unknown}, TimingAdvance: mbim.UnknownU64},
		},
		NRNeighbours: []mbim.NRNeighbourCell{{SystemSubType: mbim.DataSubclass5GNR, ProviderID: "00101", CellID: "4886718345",
			PCI: 9, TAC: 7, Signal: mbim.CodeNRSignal(-110, -15.5, 2)}},
	}
}

func TestBaseStationsInfoV3RoundTripsNRCells(t *testing.T) {
	want := nrBaseStations()
	got, err := mbim.ParseBaseStationsInfoV3(want.EncodeV3())
	if err != nil || !reflect.DeepEqual(&got, want) {
		t.Fatalf("ParseBaseStationsInfoV3(EncodeV3) = %+v, %v; want %+v", got, err, want)
	}
	nr := got.NR[0].Signal
	rsrp, ok1 := nr.RSRPdBm()
	rsrq, ok2 := nr.RSRQdB()
	sinr, ok3 := nr.SINRdB()
	if !ok1 || !ok2 || !ok3 || rsrp != -85 || rsrq != -11 || sinr != 18 {
		t.Errorf("NR signal decodes to %v dBm %v dB %v dB (%v %v %v), want -85 -11 18", rsrp, rsrq, sinr, ok1, ok2, ok3)
	}
	if _, ok := got.NR[1].Signal.RSRQdB(); ok {
		t.Errorf("unknown RSRQ decodes as known")
	}
	// The 1.0/2.0 layout carries no NR cells and no subtype.
	old, err := mbim.ParseBaseStationsInfo(want.Encode())
	if err != nil || old.NR != nil || old.SystemSubType != 0 || !reflect.DeepEqual(old.LTE, want.LTE) {
		t.Errorf("ParseBaseStationsInfo(Encode) = %+v, %v", old, err)
	}
}

func TestBaseStationsInfoV3LayoutMatchesMbimCellInfoServingNr(t *testing.T) {
	b := (&mbim.BaseStationsInfo{NR: []mbim.NRServingCell{{ProviderID: "001", NCI: 5, PCI: 7, NRARFCN: 636666, TAC: 9,
		Signal: mbim.NRSignal{RSRP: 71, RSRQ: 64, SINR: 82}, TimingAdvance: 11}}}).EncodeV3()
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
	if len(b) < 96 || u32(80) != 96 {
		t.Fatalf("NR serving list pair at 80 = %d; want the list right after the 96-byte fixed part", u32(80))
	}
	cell := 96 + 4
	if u32(96) != 1 || u32(cell) != 48 || u32(cell+4) != 6 {
		t.Fatalf("count %d, ProviderId (%d, %d); want 1 and the string after the 48-byte cell", u32(96), u32(cell), u32(cell+4))
	}
	for off, want := range map[int]uint32{8: 5, 16: 7, 20: 636666, 24: 9, 28: 71, 32: 64, 36: 82, 40: 11} {
		if got := u32(cell + off); got != want {
			t.Errorf("cell field at %d = %d, want %d", off, got, want)
		}
	}
	if q := (&mbim.BaseStationsQuery{MaxNR: 4}).EncodeV3(); len(q) != 24 || binary.LittleEndian.Uint32(q[20:]) != 4 {
		t.Errorf("3.0 query = %x, want 24 bytes with MaxNrCount last", q)
	}
}

func TestParseBaseStationsInfoV3RejectsHostileLists(t *testing.T) {
	good := nrBaseStations().EncodeV3()
	list := int(binary.LittleEndian.Uint32(good[80:]))
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"short fixed part", func(b []byte) []byte { return b[:95] }},
		{"count beyond the list", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[list:], 3); return b }},
		{"huge count", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[list:], 1<<31); return b }},
		{"list outside the buffer", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[80:], uint32(len(b))); return b }},
		{"list size overflows", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[84:], 0xFFFFFFF0); return b }},
		{"string outside the list", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[list+4:], 1<<20); return b }},
		{"odd string size", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[list+8:], 3); return b }},
		{"second cell cut", func(b []byte) []byte {
			n := binary.LittleEndian.Uint32(b[84:])
			binary.LittleEndian.PutUint32(b[84:], n-8)
			return b
		}},
	} {
		b := tc.edit(append([]byte(nil), good...))
		if _, err := mbim.ParseBaseStationsInfoV3(b); !errors.Is(err, mbim.ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", tc.name, err)
		}
	}
}

func TestNRBandOfARFCNTakesTheNarrowestBand(t *testing.T) {
	for _, tc := range []struct {
		arfcn uint32
		band  int
	}{{636666, 78}, {660000, 77}, {640000, 48}, {520000, 38}, {500000, 41}, {428000, 1}, {436000, 66}, {2079167, 261}} {
		if b, ok := mbim.NRBandOfARFCN(tc.arfcn); !ok || b != tc.band {
			t.Errorf("NRBandOfARFCN(%d) = n%d, %v; want n%d", tc.arfcn, b, ok, tc.band)
		}
	}
	if b, ok := mbim.NRBandOfARFCN(100); ok {
		t.Errorf("NRBandOfARFCN(100) = n%d, want none", b)
	}
	for _, band := range []int{1, 3, 7, 28, 38, 41, 48, 77, 78, 79, 257, 258} {
		ch, ok := mbim.NRARFCNOfBand(band)
		if back, ok2 := mbim.NRBandOfARFCN(ch); !ok || !ok2 || back != band {
			t.Errorf("NRARFCNOfBand(%d) = %d, %v, which maps to n%d", band, ch, ok, back)
		}
	}
	if _, ok := mbim.NRARFCNOfBand(65); ok {
		t.Errorf("NRARFCNOfBand(65) found a channel; n65 is left out of the table")
	}
}
