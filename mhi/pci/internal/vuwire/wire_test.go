package vuwire

import (
	"reflect"
	"testing"
)

// Every payload the client encodes decodes to the same value on the
// server side, and back.
func TestPayloadsRoundTrip(t *testing.T) {
	m := DMAMap{ArgSz: DMAMapSize, Flags: DMAFlagRead | DMAFlagWrite, Offset: 0x2000, Addr: 0x100000, Size: 0x400000}
	if got, err := DecodeDMAMap(m.Encode()); err != nil || got != m {
		t.Errorf("DMAMap: %+v, %v", got, err)
	}
	u := DMAUnmap{ArgSz: DMAUnmapSize, Flags: DMAUnmapAll, Addr: 0x100000, Size: 0x1000}
	if got, err := DecodeDMAUnmap(u.Encode()); err != nil || got != u {
		t.Errorf("DMAUnmap: %+v, %v", got, err)
	}
	d := DeviceInfo{Flags: DeviceFlagPCI, NumRegions: NumRegions, NumIRQs: NumIRQs}
	if got, err := DecodeDeviceInfo(d.Encode()); err != nil || got != d {
		t.Errorf("DeviceInfo: %+v, %v", got, err)
	}
	r := RegionInfo{ArgSz: RegionInfoSize, Flags: RegionFlagRead, Index: RegionConfig, Size: 256, Offset: 7 << 40}
	if got, err := DecodeRegionInfo(r.Encode()); err != nil || got != r {
		t.Errorf("RegionInfo: %+v, %v", got, err)
	}
	if got, err := DecodeRegionInfoRequest(r.Encode()); err != nil || got.Index != r.Index || got.ArgSz != RegionInfoSize {
		t.Errorf("RegionInfo request: %+v, %v", got, err)
	}
	q := IRQInfo{ArgSz: IRQInfoSize, Flags: IRQInfoEventfd, Index: IRQMSI, Count: 8}
	if got, err := DecodeIRQInfo(q.Encode()); err != nil || got != q {
		t.Errorf("IRQInfo: %+v, %v", got, err)
	}
	s := IRQSet{ArgSz: IRQSetSize + 2, Flags: IRQSetDataBool | IRQSetActionTrig, Index: IRQMSI, Start: 1, Count: 2, Bools: []byte{1, 0}}
	if got, err := DecodeIRQSet(s.Encode()); err != nil || !reflect.DeepEqual(got, s) {
		t.Errorf("IRQSet: %+v, %v", got, err)
	}
	a := RegionAccess{Offset: 0x48, Region: RegionBAR0, Count: 4}
	b := a.Encode(4)
	copy(b[RegionAccessSize:], []byte{1, 2, 3, 4})
	got, err := DecodeRegionAccess(b, true)
	if err != nil || got.Offset != a.Offset || got.Region != a.Region || got.Count != 4 || string(got.Data) != "\x01\x02\x03\x04" {
		t.Errorf("RegionAccess: %+v, %v", got, err)
	}
	if _, err := DecodeRegionAccess(b[:RegionAccessSize+3], true); err == nil {
		t.Error("a region access missing a data byte decoded")
	}
	v, err := DecodeVersion(EncodeVersion(`{"capabilities":{"max_msg_fds":16,"pgsizes":4096}}`))
	if err != nil || v.Major != 0 || v.Caps.MaxMsgFDs == nil || *v.Caps.MaxMsgFDs != 16 || *v.Caps.PgSizes != PageSize {
		t.Errorf("Version: %+v, %v", v, err)
	}
	var hb [HeaderSize]byte
	h := Header{ID: 9, Cmd: CmdRegionRead, Size: MaxMessage, Flags: TypeReply | FlagError, Error: 22}
	h.Put(hb[:])
	if got, err := ParseHeader(hb[:]); err != nil || got != h {
		t.Errorf("Header: %+v, %v", got, err)
	}
	h.Size = MaxMessage + 1
	h.Put(hb[:])
	if _, err := ParseHeader(hb[:]); err == nil {
		t.Error("a header over MaxMessage parsed")
	}
}
