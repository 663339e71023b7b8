package vfiouser

import (
	"testing"

	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/internal/vuwire"
	"github.com/mhistack/mhistack/mhi/pci/vpci/vpcitest"
)

// FuzzMessages feeds arbitrary byte streams to the message decoder and the
// handlers, as a hostile or broken client would send them: a stream is cut
// into messages by their size fields, and each is handled against a live
// server and model. Nothing may panic, every reply must fit the limits a
// client relies on, and an error reply carries no payload.
func FuzzMessages(f *testing.F) {
	msg := func(cmd uint16, flags uint32, body []byte) []byte {
		b := make([]byte, vuwire.HeaderSize+len(body))
		vuwire.Header{ID: 7, Cmd: cmd, Size: uint32(len(b)), Flags: flags}.Put(b)
		copy(b[vuwire.HeaderSize:], body)
		return b
	}
	js := `{"capabilities":{"max_msg_fds":16,"pgsizes":4096}}`
	f.Add(msg(vuwire.CmdVersion, 0, append(append(make([]byte, 4), js...), 0)))
	f.Add(msg(vuwire.CmdDeviceGetInfo, 0, u32s(16, 0, 0, 0)))
	f.Add(msg(vuwire.CmdRegionInfo, 0, u32s(32, 0, 7, 0, 0, 0, 0, 0)))
	f.Add(msg(vuwire.CmdIRQInfo, 0, u32s(16, 0, 1, 0)))
	f.Add(msg(vuwire.CmdDMAMap, 0, mapReq(3, 0, 0x100000, 0x1000)))
	f.Add(append(msg(vuwire.CmdDMAMap, 0, mapReq(3, 0, 0x100000, 0x1000)), msg(vuwire.CmdDMAUnmap, 0, unmapReq(0, 0x100000, 0x1000))...))
	f.Add(msg(vuwire.CmdSetIRQs, 0, irqSetReq(vuwire.IRQSetDataBool|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 2, 1, 1)))
	f.Add(msg(vuwire.CmdSetIRQs, 0, irqSetReq(vuwire.IRQSetDataNone|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 0)))
	f.Add(append(msg(vuwire.CmdRegionWrite, 0, access(vuwire.RegionConfig, pci.CfgCommand, []byte{6, 0}, 2)),
		msg(vuwire.CmdRegionWrite, vuwire.FlagNoReply, access(0, 0x38, u32s(0x200), 4))...))
	f.Add(msg(vuwire.CmdRegionRead, 0, access(0, 0x48, nil, 4)))
	f.Add(msg(vuwire.CmdRegionWrite, 0, access(vuwire.RegionConfig, pci.CfgBAR0, u32s(0xffffffff), 4)))
	f.Add(msg(vuwire.CmdDeviceReset, 0, nil))
	f.Add(msg(vuwire.CmdDMAUnmap, 0, unmapReq(vuwire.DMAUnmapAll, 0, 0)))

	f.Fuzz(func(t *testing.T, stream []byte) {
		m := &vpcitest.Regs{}
		srv, err := New(m)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		c := newConn(srv, nil)
		for len(stream) > 0 {
			h, err := vuwire.ParseHeader(stream)
			if err != nil {
				return // the connection would be dropped here
			}
			if int(h.Size) > len(stream) {
				return // truncated: the read would block, then EOF
			}
			msg := message{hdr: h, body: stream[vuwire.HeaderSize:h.Size]}
			stream = stream[h.Size:]
			if h.Flags&vuwire.FlagTypeMask != vuwire.TypeCommand {
				continue
			}
			reply, errno := c.handle(&msg)
			if errno != 0 {
				continue
			}
			switch h.Cmd {
			case vuwire.CmdVersion:
				if len(reply) > len(msg.body) && len(reply) > 4 {
					t.Fatalf("VERSION reply of %d bytes for a %d-byte request", len(reply), len(msg.body))
				}
			case vuwire.CmdRegionRead:
				a, _ := vuwire.DecodeRegionAccess(msg.body, false)
				if len(reply) != vuwire.RegionAccessSize+int(a.Count) {
					t.Fatalf("REGION_READ of %d bytes answered with %d", a.Count, len(reply))
				}
			case vuwire.CmdRegionInfo:
				if len(reply) != vuwire.RegionInfoSize {
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
	f.Add(irqSetReq(vuwire.IRQSetDataBool|vuwire.IRQSetActionTrig, vuwire.IRQMSI, 0, 2, 1, 0))
	f.Add(access(0, 4, u32s(1), 4))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = vuwire.ParseHeader(b)
		_, _ = vuwire.DecodeVersion(b)
		_, _ = vuwire.DecodeDMAMap(b)
		_, _ = vuwire.DecodeDMAUnmap(b)
		_, _ = vuwire.DecodeRegionInfoRequest(b)
		_, _ = vuwire.DecodeIRQInfoRequest(b)
		if s, err := vuwire.DecodeIRQSet(b); err == nil && len(s.Bools) > len(b) {
			t.Fatal("DATA_BOOL slice longer than the payload")
		}
		if a, err := vuwire.DecodeRegionAccess(b, true); err == nil && len(a.Data) != int(a.Count) {
			t.Fatalf("REGION_WRITE data %d bytes for count %d", len(a.Data), a.Count)
		}
	})
}
