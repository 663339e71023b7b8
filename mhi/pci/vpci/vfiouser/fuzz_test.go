package vfiouser

import (
	"testing"

	"github.com/mhistack/mhistack/mhi/pci"
)

// FuzzMessages feeds arbitrary byte streams to the message decoder and the
// handlers, as a hostile or broken client would send them: a stream is cut
// into messages by their size fields, and each is handled against a live
// server and model. Nothing may panic, every reply must fit the limits a
// client relies on, and an error reply carries no payload.
func FuzzMessages(f *testing.F) {
	msg := func(cmd uint16, flags uint32, body []byte) []byte {
		b := make([]byte, headerSize+len(body))
		header{ID: 7, Cmd: cmd, Size: uint32(len(b)), Flags: flags}.put(b)
		copy(b[headerSize:], body)
		return b
	}
	js := `{"capabilities":{"max_msg_fds":16,"pgsizes":4096}}`
	f.Add(msg(cmdVersion, 0, append(append(make([]byte, 4), js...), 0)))
	f.Add(msg(cmdDeviceGetInfo, 0, u32s(16, 0, 0, 0)))
	f.Add(msg(cmdRegionInfo, 0, u32s(32, 0, 7, 0, 0, 0, 0, 0)))
	f.Add(msg(cmdIRQInfo, 0, u32s(16, 0, 1, 0)))
	f.Add(msg(cmdDMAMap, 0, mapReq(3, 0, 0x100000, 0x1000)))
	f.Add(append(msg(cmdDMAMap, 0, mapReq(3, 0, 0x100000, 0x1000)), msg(cmdDMAUnmap, 0, unmapReq(0, 0x100000, 0x1000))...))
	f.Add(msg(cmdSetIRQs, 0, irqSetReq(irqSetDataBool|irqSetActionTrig, irqMSI, 0, 2, 1, 1)))
	f.Add(msg(cmdSetIRQs, 0, irqSetReq(irqSetDataNone|irqSetActionTrig, irqMSI, 0, 0)))
	f.Add(append(msg(cmdRegionWrite, 0, access(regionConfig, pci.CfgCommand, []byte{6, 0}, 2)),
		msg(cmdRegionWrite, flagNoReply, access(0, 0x38, u32s(0x200), 4))...))
	f.Add(msg(cmdRegionRead, 0, access(0, 0x48, nil, 4)))
	f.Add(msg(cmdRegionWrite, 0, access(regionConfig, pci.CfgBAR0, u32s(0xffffffff), 4)))
	f.Add(msg(cmdDeviceReset, 0, nil))
	f.Add(msg(cmdDMAUnmap, 0, unmapReq(dmaUnmapAll, 0, 0)))

	f.Fuzz(func(t *testing.T, stream []byte) {
		m := &regModel{}
		srv, err := New(m)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		c := newConn(srv, nil)
		for len(stream) > 0 {
			h, err := parseHeader(stream)
			if err != nil {
				return // the connection would be dropped here
			}
			if int(h.Size) > len(stream) {
				return // truncated: the read would block, then EOF
			}
			msg := message{hdr: h, body: stream[headerSize:h.Size]}
			stream = stream[h.Size:]
			if h.Flags&flagTypeMask != typeCommand {
				continue
			}
			reply, errno := c.handle(&msg)
			if errno != 0 {
				continue
			}
			switch h.Cmd {
			case cmdVersion:
				if len(reply) > len(msg.body) && len(reply) > 4 {
					t.Fatalf("VERSION reply of %d bytes for a %d-byte request", len(reply), len(msg.body))
				}
			case cmdRegionRead:
				a, _ := decodeRegionAccess(msg.body, false)
				if len(reply) != regionAccessSize+int(a.Count) {
					t.Fatalf("REGION_READ of %d bytes answered with %d", a.Count, len(reply))
				}
			case cmdRegionInfo:
				if len(reply) != regionInfoSize {
					t.Fatalf("REGION_INFO reply of %d bytes", len(reply))
				}
			}
		}
	})
}

// FuzzDecoders checks the pure decoders on arbitrary payloads: no panic,
// and whatever they accept stays inside the payload.
func FuzzDecoders(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, '{', '}', 0})
	f.Add(irqSetReq(irqSetDataBool|irqSetActionTrig, irqMSI, 0, 2, 1, 0))
	f.Add(access(0, 4, u32s(1), 4))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseHeader(b)
		_, _ = decodeVersion(b)
		_, _ = decodeDMAMap(b)
		_, _ = decodeDMAUnmap(b)
		_, _ = decodeRegionInfo(b)
		_, _ = decodeIRQInfo(b)
		if s, err := decodeIRQSet(b); err == nil && len(s.Bools) > len(b) {
			t.Fatal("DATA_BOOL slice longer than the payload")
		}
		if a, err := decodeRegionAccess(b, true); err == nil && len(a.Data) != int(a.Count) {
			t.Fatalf("REGION_WRITE data %d bytes for count %d", len(a.Data), a.Count)
		}
	})
}
