package mbim

// Microsoft's MBIM extensions (MBIMEx) that status needs: the VERSION
// exchange that switches the function to the MBIMEx 2.0 or 3.0 layouts,
// the 2.0 SIGNAL_STATE with RSRP and SNR per RAT, and the 2.0 layouts of
// REGISTER_STATE and PACKET_SERVICE. Layouts: libmbim
// data/mbim-service-ms-basic-connect-extensions-v2.json ("Version") and
// data/mbim-service-ms-basic-connect-v2.json; Microsoft's "MB 5G data
// class support" page. BASE_STATIONS_INFO is in base_stations.go, the 3.0
// layouts of the basic-connect commands in basic_connect_v3.go; calls in
// ms_extensions_calls.go.

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MS_BASIC_CONNECT_EXTENSIONS command IDs.
const (
	CIDMSBaseStationsInfo uint32 = 11
	CIDMSVersion          uint32 = 15
)

// Version is an MBIM or MBIMEx version as VERSION carries it: major in
// the high byte, minor in the low one (0x0200 is 2.0).
type Version uint16

// Versions the host speaks: MBIM 1.0 always, MBIMEx 2.0 or 3.0 when the
// function agrees. 3.0 changes the layouts of SUBSCRIBER_READY_STATUS,
// PACKET_SERVICE, CONNECT and BASE_STATIONS_INFO among the commands the
// host uses (the 3.0 codecs are the *V3 ones); REGISTER_STATE and
// SIGNAL_STATE keep their 2.0 layouts.
const (
	MBIMVersion1 Version = 0x0100
	MBIMEx1      Version = 0x0100 // no extension layouts
	MBIMEx2      Version = 0x0200
	MBIMEx3      Version = 0x0300
)

// VersionInfo is the VERSION query and answer: {u16 MbimVersion, u16
// MbimExtendedVersion}. The host sends the highest it speaks, the
// function answers the one it will use.
type VersionInfo struct {
	MBIM, Extended Version
}

// Encode returns the 4-byte buffer.
func (v *VersionInfo) Encode() []byte {
	b := binary.LittleEndian.AppendUint16(nil, uint16(v.MBIM))
	return binary.LittleEndian.AppendUint16(b, uint16(v.Extended))
}

// ParseVersionInfo decodes the VERSION query or answer.
func ParseVersionInfo(b []byte) (VersionInfo, error) {
	r := newReader(b, "MS VERSION", 4)
	if r.err != nil {
		return VersionInfo{}, r.err
	}
	return VersionInfo{MBIM: Version(binary.LittleEndian.Uint16(b)), Extended: Version(binary.LittleEndian.Uint16(b[2:]))}, nil
}

// RSRPSNR is one RAT's entry of the MBIMEx 2.0 SIGNAL_STATE
// (MbimRsrpSnrInfo). RSRP is coded 0..126 (n − 157 dBm, the lower edge of
// TS 38.133's reporting range RSRP_n), SNR 0..127 (n/2 − 23.5 dB); larger
// values are "unknown" (mbimcli prints the same scale). SystemType is the
// data class the entry measures (LTE, 5G-NSA or 5G-SA).
type RSRPSNR struct {
	RSRP, SNR                   uint32
	RSRPThreshold, SNRThreshold uint32
	SystemType                  DataClass
}

// Unknown is MBIMEx's "no value" for RSRP, SNR and the base stations'
// signed and coded fields.
const Unknown uint32 = 0xFFFFFFFF

// RSRPdBm decodes RSRP; ok is false when it is unknown.
func (e *RSRPSNR) RSRPdBm() (dbm float64, ok bool) {
	if e.RSRP > 126 {
		return 0, false
	}
	return float64(e.RSRP) - 157, true
}

// SNRdB decodes SNR; ok is false when it is unknown.
func (e *RSRPSNR) SNRdB() (db float64, ok bool) {
	if e.SNR > 127 {
		return 0, false
	}
	return float64(e.SNR)/2 - 23.5, true
}

// CodeRSRP codes a measured RSRP (dBm) for RSRPSNR: the reporting range
// that holds it, clamped to 0..126.
func CodeRSRP(dbm float64) uint32 {
	return uint32(max(0, min(126, math.Floor(dbm)+157)))
}

// CodeSNR codes a measured SNR (dB) for RSRPSNR, clamped to 0..127.
func CodeSNR(db float64) uint32 {
	return uint32(max(0, min(127, math.Floor((db+23.5)*2))))
}

// rsrpSNRSize is one MbimRsrpSnrInfo.
const rsrpSNRSize = 20

// maxRSRPSNR bounds the entries a parser accepts: one per data class bit
// is all a function can mean.
const maxRSRPSNR = 32

// EncodeV2 returns the MBIMEx 2.0 SIGNAL_STATE buffer: the 1.0 fields,
// then an (offset, size) pair for {u32 count, count × MbimRsrpSnrInfo}.
func (s *SignalState) EncodeV2() []byte {
	w := newWriter(28)
	copy(w.b, s.Encode())
	arr := binary.LittleEndian.AppendUint32(nil, uint32(len(s.RSRPSNR)))
	for _, e := range s.RSRPSNR {
		for _, v := range []uint32{e.RSRP, e.SNR, e.RSRPThreshold, e.SNRThreshold, uint32(e.SystemType)} {
			arr = binary.LittleEndian.AppendUint32(arr, v)
		}
	}
	w.ol(20, arr)
	return w.bytes()
}

// ParseSignalStateV2 decodes the MBIMEx 2.0 SIGNAL_STATE (answer and
// indication). An absent array (offset 0) is no entries.
func ParseSignalStateV2(b []byte) (SignalState, error) {
	s, err := ParseSignalState(b)
	if err != nil {
		return s, err
	}
	r := newReader(b, "SIGNAL_STATE v2", 28)
	off, size := r.u32(20), r.u32(24)
	if r.err != nil || off == 0 {
		return s, r.err
	}
	arr := r.bytesAt(0, uint64(off), uint64(size), "RsrpSnr")
	if r.err != nil {
		return s, r.err
	}
	if len(arr) < 4 {
		r.failf("RsrpSnr of %d bytes, want the count", len(arr))
		return s, r.err
	}
	n := binary.LittleEndian.Uint32(arr)
	if n > maxRSRPSNR || uint64(len(arr)) < 4+uint64(n)*rsrpSNRSize {
		r.failf("RsrpSnr count %d in %d bytes", n, len(arr))
		return s, r.err
	}
	for i := range int(n) {
		e := arr[4+i*rsrpSNRSize:]
		u := func(k int) uint32 { return binary.LittleEndian.Uint32(e[4*k:]) }
		s.RSRPSNR = append(s.RSRPSNR, RSRPSNR{RSRP: u(0), SNR: u(1), RSRPThreshold: u(2), SNRThreshold: u(3), SystemType: DataClass(u(4))})
	}
	return s, nil
}

// EncodeV2 returns the MBIMEx 2.0 REGISTER_STATE: the 1.0 fields, then
// PreferredDataClasses (a 52-byte fixed part). ParseRegisterState reads
// both layouts (it does not need the last field).
func (s *RegisterState) EncodeV2() []byte {
	w := newWriter(52)
	s.encodeFixed(w)
	w.u32(48, uint32(s.PreferredDataClasses))
	s.encodeStrings(w)
	return w.bytes()
}

// EncodeV2 returns the MBIMEx 2.0 PACKET_SERVICE: the 1.0 fields (the
// third named CurrentDataClass), then FrequencyRange. ParsePacketService
// reads both layouts.
func (p *PacketService) EncodeV2() []byte {
	w := newWriter(32)
	copy(w.b, p.Encode())
	w.u32(28, p.FrequencyRange)
	return w.bytes()
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v>>8, v&0xff) }
