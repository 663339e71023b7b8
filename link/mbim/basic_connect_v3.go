package mbim

// The MBIMEx 3.0 layouts of the basic-connect commands the host uses
// (libmbim data/mbim-service-ms-basic-connect-v3.json; Microsoft's "MBIM
// extensions for 5G", MBIM_SUBSCRIBER_READY_INFO_EX3,
// MBIM_PACKET_SERVICE_INFO_V2/V3, MBIM_SET_CONNECT_EX3 and
// MBIM_CONNECT_INFO_EX3). REGISTER_STATE and SIGNAL_STATE keep their 2.0
// layouts; IP_CONFIGURATION its 1.0 one.

import "encoding/binary"

// tlvWCHARString is the TLV type of a UTF-16LE string (MBIM_TLV_TYPE_WCHAR_STR).
const tlvWCHARString uint16 = 10

// tlvHeader is an MBIM_TLV_IE's header: u16 type, u8 reserved, u8
// padding length, u32 data length; the data follows, padded to 4 bytes.
const tlvHeader = 8

// appendTLV appends a TLV of type typ holding data.
func appendTLV(b []byte, typ uint16, data []byte) []byte {
	pad := (4 - len(data)%4) % 4
	b = binary.LittleEndian.AppendUint16(b, typ)
	b = append(b, 0, byte(pad))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = append(b, data...)
	return append(b, make([]byte, pad)...)
}

// tlvString reads the string TLV at off and returns it and the offset
// after it.
func (r *reader) tlvString(off int, what string) (string, int) {
	if !r.span(uint64(off), tlvHeader, what) {
		return "", off
	}
	typ, pad, n := binary.LittleEndian.Uint16(r.b[off:]), uint64(r.b[off+3]), uint64(binary.LittleEndian.Uint32(r.b[off+4:]))
	switch {
	case typ != tlvWCHARString:
		r.failf("%s: TLV type %d, want a string (%d)", what, typ, tlvWCHARString)
	case pad > 3 || n%2 != 0:
		r.failf("%s: string TLV of %d bytes with %d of padding", what, n, pad)
	case !r.span(uint64(off)+tlvHeader, n+pad, what):
	}
	if r.err != nil {
		return "", off
	}
	s := uint64(off) + tlvHeader
	return decodeUTF16(r.b[s : s+n]), int(s + n + pad)
}

// EncodeV3 returns the MBIMEx 3.0 SUBSCRIBER_READY_STATUS buffer: the 1.0
// fields with Flags after ReadyState.
func (s *SubscriberReadyStatus) EncodeV3() []byte {
	w := newWriter(32 + 8*len(s.TelephoneNumbers))
	w.u32(0, uint32(s.ReadyState))
	w.u32(4, s.Flags)
	s.encodeFrom(w, 8)
	return w.bytes()
}

// ParseSubscriberReadyStatusV3 decodes the MBIMEx 3.0 layout.
func ParseSubscriberReadyStatusV3(b []byte) (SubscriberReadyStatus, error) {
	r := newReader(b, "SUBSCRIBER_READY_STATUS v3", 32)
	s := SubscriberReadyStatus{ReadyState: ReadyState(r.u32(0)), Flags: r.u32(4)}
	s.parseFrom(r, 8)
	return s, r.err
}

// EncodeV3 returns the MBIMEx 3.0 PACKET_SERVICE buffer: the 2.0 fields,
// then DataSubclass and the TAI (u16 MCC, u16 MNC, u32 TAC).
func (p *PacketService) EncodeV3() []byte {
	w := newWriter(44)
	copy(w.b, p.EncodeV2())
	w.u32(32, uint32(p.DataSubclass))
	binary.LittleEndian.PutUint16(w.b[36:], p.TAI.MCC)
	binary.LittleEndian.PutUint16(w.b[38:], p.TAI.MNC)
	w.u32(40, p.TAI.TAC)
	return w.bytes()
}

// ParsePacketServiceV3 decodes the MBIMEx 3.0 layout.
// HighestAvailableDataClass is MbimDataClassV3 there (one 5G bit, 5G-NSA's);
// it is returned as it came, with DataSubclass beside it.
func ParsePacketServiceV3(b []byte) (PacketService, error) {
	r := newReader(b, "PACKET_SERVICE v3", 44)
	if r.err != nil {
		return PacketService{}, r.err
	}
	p, err := ParsePacketService(b)
	p.FrequencyRange, p.DataSubclass = r.u32(28), DataSubclass(r.u32(32))
	p.TAI = TAI{MCC: binary.LittleEndian.Uint16(b[36:]), MNC: binary.LittleEndian.Uint16(b[38:]), TAC: r.u32(40)}
	return p, err
}

// HighestDataClass is HighestAvailableDataClass in the 1.0/2.0 bits: a
// 3.0 answer's one 5G bit (5G-NSA's) becomes 5G-SA when DataSubclass says
// standalone NR without EN-DC.
func (p *PacketService) HighestDataClass() DataClass {
	d := p.HighestAvailableDataClass
	if d&DataClass5GNSA != 0 && p.DataSubclass&DataSubclass5GNR != 0 && p.DataSubclass&DataSubclass5GENDC == 0 {
		d = d&^DataClass5GNSA | DataClass5GSA
	}
	return d
}

// TAI is MbimTai: the tracking area (MCC and MNC as numbers, e.g. 1
// and 1 for 001-01).
type TAI struct {
	MCC, MNC uint16
	TAC      uint32
}

// EncodeV3 returns the MBIMEx 3.0 CONNECT set buffer: the 1.0 numbers
// and MediaPreference in a 40-byte fixed part, then the access string,
// user name and password as string TLVs (no further IEs).
func (c *ConnectRequest) EncodeV3() []byte {
	w := newWriter(40)
	w.u32(0, c.SessionID)
	w.u32(4, b32(c.Activate))
	w.u32(8, c.Compression)
	w.u32(12, uint32(c.Auth))
	w.u32(16, uint32(c.IPType))
	w.uuid(20, c.ContextType)
	w.u32(36, c.MediaPreference)
	for _, s := range []string{c.APN, c.User, c.Password} {
		w.b = appendTLV(w.b, tlvWCHARString, encodeUTF16(s))
	}
	return w.bytes()
}

// ParseConnectRequestV3 decodes an MBIMEx 3.0 CONNECT set buffer
// (device side); IEs after the password are ignored.
func ParseConnectRequestV3(b []byte) (ConnectRequest, error) {
	r := newReader(b, "CONNECT set v3", 40)
	c := ConnectRequest{SessionID: r.u32(0), Compression: r.u32(8), Auth: AuthProtocol(r.u32(12)),
		IPType: IPType(r.u32(16)), ContextType: r.uuid(20), MediaPreference: r.u32(36)}
	off := 40
	c.APN, off = r.tlvString(off, "AccessString")
	c.User, off = r.tlvString(off, "UserName")
	c.Password, _ = r.tlvString(off, "Password")
	switch a := r.u32(4); {
	case r.err != nil:
		return ConnectRequest{}, r.err
	case a > 1:
		r.failf("activation command %d", a)
	default:
		c.Activate = a == 1
	}
	return c, r.err
}

// EncodeV3 returns the MBIMEx 3.0 CONNECT answer and indication: the 1.0
// fields and MediaPreference, then the access string as a TLV.
func (c *ContextState) EncodeV3() []byte {
	w := newWriter(40)
	copy(w.b, c.Encode())
	w.u32(36, c.MediaPreference)
	w.b = appendTLV(w.b, tlvWCHARString, encodeUTF16(c.APN))
	return w.bytes()
}

// ParseContextStateV3 decodes the MBIMEx 3.0 CONNECT answer and
// indication; IEs after the access string are ignored.
func ParseContextStateV3(b []byte) (ContextState, error) {
	r := newReader(b, "CONNECT v3", 48)
	if r.err != nil {
		return ContextState{}, r.err
	}
	c, _ := ParseContextState(b)
	c.MediaPreference = r.u32(36)
	c.APN, _ = r.tlvString(40, "AccessString")
	if r.err != nil {
		return ContextState{}, r.err
	}
	return c, nil
}
