package link_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
)

// offsetProfiles are the profiles whose modems offset MBIM session IDs
// on the wire (mhi.Profile.MBIMSessionOffset).
func offsetProfiles(t *testing.T) []*mhi.Profile {
	var out []*mhi.Profile
	for _, p := range mhi.Profiles() {
		if p.MBIMSessionOffset != 0 {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatal("no profile has an MBIM session offset")
	}
	return out
}

// TestMBIMSessionOffsetQuirkMovesData: on every profile whose modem puts
// MBIM session n in NDPs of session 112+n (Foxconn T99W640, DW5934e,
// T99W760), the framing the host takes from the profile's data path
// moves session 0's and session 1's packets both ways; the modem sees
// them on its own sessions 0 and 1, i.e. NDP sessions 112 and 113.
func TestMBIMSessionOffsetQuirkMovesData(t *testing.T) {
	for _, p := range offsetProfiles(t) {
		t.Run(p.Name, func(t *testing.T) {
			dp, err := p.DataPath(mhi.ChannelIPHW0MBIM, mhi.ControlMBIM)
			if err != nil {
				t.Fatal(err)
			}
			f, err := link.FramingFor(dp)
			if err != nil {
				t.Fatal(err)
			}
			col := &ulCollector{}
			// The modem's side of the quirk comes from the profile, not
			// from the host's framing.
			net := &simnet.PacketNet{Framing: mbim.NTB{SessionOffset: p.MBIMSessionOffset}, OnPacket: col.add}
			r := newRig(t, rigOptions{profile: p.Name, fn: net, link: link.Options{Channel: dp.Channel, Framing: f}})
			waitRunning(t, net)
			s1, err := r.ep.NewSessionEndpoint(1)
			if err != nil {
				t.Fatal(err)
			}
			defer s1.Close()
			snk1 := newSink()
			s1.Attach(snk1)

			a, b := udp4(t, 1, 100), udp4(t, 2, 200)
			if err := net.Send(0, a); err != nil {
				t.Fatal(err)
			}
			if err := net.Send(1, b); err != nil {
				t.Fatal(err)
			}
			if got := r.snk.waitFor(t, 1, 5*time.Second); !bytes.Equal(got[0], a) {
				t.Fatal("session 0's DL packet differs")
			}
			if got := snk1.waitFor(t, 1, 5*time.Second); !bytes.Equal(got[0], b) {
				t.Fatal("session 1's DL packet differs")
			}
			write(t, r.ep, a)
			l := pktList(b)
			if n, err := s1.WritePackets(l); n != 1 || err != nil {
				t.Fatalf("session 1 WritePackets = %d, %v", n, err)
			}
			l.DecRef()
			got, sessions := col.wait(t, 2)
			for i := range got {
				want := uint8(0)
				if bytes.Equal(got[i], b) {
					want = 1
				}
				if sessions[i] != want {
					t.Errorf("UL packet %d reached the modem on session %d, want %d", i, sessions[i], want)
				}
			}
			if st := r.ep.Stats(); st.RXDrops.Session != 0 || st.RXErrors != 0 {
				t.Errorf("drops %+v, %d RX errors", st.RXDrops, st.RXErrors)
			}
		})
	}
}

// TestMBIMSessionOffsetMismatchIsDroppedAndCounted: a host that ignores
// the offset (mbim.NTB{} on a T99W640) gets nothing on session 0: the
// modem's session 0 arrives as NDP session 112, dropped and counted as a
// session nobody serves; the host's UL on NDP session 0 is no session of
// the carrier's, which drops and counts it. The host refuses endpoints
// for sessions the offset leaves no room for.
func TestMBIMSessionOffsetMismatchIsDroppedAndCounted(t *testing.T) {
	p := offsetProfiles(t)[0]
	cn, err := simnet.NewCarrierNetwork(simnet.CarrierOptions{Framing: mbim.NTB{SessionOffset: p.MBIMSessionOffset}})
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	r := newRig(t, rigOptions{profile: p.Name, fn: cn, link: link.Options{Channel: mhi.ChannelIPHW0MBIM, Framing: mbim.NTB{}}})
	write(t, r.ep, udp4(t, 1, 100))
	waitUntil(t, 5*time.Second, "the carrier dropping the host's session-0 NTB", func() bool {
		return cn.Stats().UnknownSessions == 1
	})
	if st := cn.Stats(); st.ULPackets != 0 {
		t.Errorf("carrier took %d UL packets on a session it does not have", st.ULPackets)
	}

	net := &simnet.PacketNet{Framing: mbim.NTB{SessionOffset: p.MBIMSessionOffset}}
	r2 := newRig(t, rigOptions{profile: p.Name, fn: net, link: link.Options{Channel: mhi.ChannelIPHW0MBIM, Framing: mbim.NTB{}}})
	waitRunning(t, net)
	if err := net.Send(0, udp4(t, 2, 100)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the host dropping NDP session 112", func() bool { return r2.ep.Stats().RXDrops.Session == 1 })
	if n := r2.snk.count(); n != 0 {
		t.Errorf("session 0 received %d packets of NDP session 112", n)
	}

	f := mbim.NTB{SessionOffset: p.MBIMSessionOffset}
	r3 := newRig(t, rigOptions{profile: p.Name, fn: &simnet.PacketNet{Framing: f}, link: link.Options{Channel: mhi.ChannelIPHW0MBIM, Framing: f}})
	if _, err := r3.ep.NewSessionEndpoint(uint8(f.Sessions())); err == nil {
		t.Errorf("an endpoint for session %d, which NDP sessions cannot carry with offset %d", f.Sessions(), f.SessionOffset)
	}
	if _, err := link.New(t.Context(), r3.c, link.Options{Channel: mhi.ChannelIPHW0MBIM, Framing: f, Session: 255}); err == nil || !strings.Contains(err.Error(), "carries sessions 0 to 143") {
		t.Errorf("New with session 255 and offset 112: %v", err)
	}
}

// TestNTBOdditiesAreCountedAndDeliveredOnce: DL NTBs with the oddities
// real modems send (simnet.NTBQuirks: wSequence restarting and repeating,
// the last NDP chaining back to the first, a non-IP datagram in the IP
// session) deliver every IP packet exactly once; the host counts the
// sequence glitches (without failing anything), the chains that went
// back (RXErrors, after their datagrams) and the non-IP datagrams
// (RXDrops.Protocol). Without the oddities nothing is counted.
func TestNTBOdditiesAreCountedAndDeliveredOnce(t *testing.T) {
	for _, odd := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "oddities"}[odd], func(t *testing.T) {
			q := simnet.NTBQuirks{}
			if odd {
				q = simnet.NTBQuirks{SequenceGlitches: true, CyclicNDP: true, NonIP: true}
			}
			net := &simnet.PacketNet{Framing: mbim.NTB{}, MaxDatagrams: 8, NTBQuirks: q}
			r := newRig(t, rigOptions{profile: "quectel-rm5xx", fn: net, link: link.Options{Channel: mhi.ChannelIPHW0MBIM, Framing: mbim.NTB{}}})
			waitRunning(t, net)
			// 17 NTBs of 4 packets: the 8th and 16th carry the oddities.
			const ntbs, per = 17, 4
			var sent [][]byte
			for i := range ntbs {
				var batch [][]byte
				for j := range per {
					batch = append(batch, udp4(t, i*per+j, 100+j))
				}
				if err := net.Send(0, batch...); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, batch...)
			}
			got := r.snk.waitFor(t, len(sent), 10*time.Second)
			// Whatever a second walk of a chain would deliver has been
			// delivered by now: the frames are all in.
			want := map[bool]struct{ errs, proto, minGlitch uint64 }{false: {0, 0, 0}, true: {2, 2, 2}}[odd]
			// The poller publishes its counts at the end of each pass.
			waitUntil(t, 5*time.Second, "every NTB decoded and counted", func() bool {
				st := r.ep.Stats()
				return st.RXFrames == ntbs && st.RXErrors >= want.errs && st.RXDrops.Protocol >= want.proto && st.RXSequenceGlitches >= want.minGlitch
			})
			got = r.snk.packets()
			if len(got) != len(sent) {
				t.Fatalf("%d packets delivered for %d sent", len(got), len(sent))
			}
			for i := range sent {
				if !bytes.Equal(got[i], sent[i]) {
					t.Fatalf("packet %d differs", i)
				}
			}
			st := r.ep.Stats()
			if st.RXErrors != want.errs || st.RXDrops.Protocol != want.proto || st.RXSequenceGlitches < want.minGlitch || (!odd && st.RXSequenceGlitches != 0) {
				t.Errorf("RXErrors %d, RXDrops.Protocol %d, RXSequenceGlitches %d; want %d, %d, at least %d",
					st.RXErrors, st.RXDrops.Protocol, st.RXSequenceGlitches, want.errs, want.proto, want.minGlitch)
			}
		})
	}
}

// TestNTBLargerThanTheMRUArrivesChained: with mhi_wwan_mbim's 3500-byte
// MRU, a DL NTB holding one 9000-byte datagram, and a 32 KiB NTB of 23
// datagrams, each arrive in OVERFLOW pieces over several buffers; the
// endpoint reassembles them and delivers every datagram intact. With the
// profile's MRU (32768, Linux pci_generic "bus: mhi: pci_generic:
// configurable network interface MRU") the endpoint takes the profile's.
func TestNTBLargerThanTheMRUArrivesChained(t *testing.T) {
	net := &simnet.PacketNet{Framing: mbim.NTB{}}
	r := newRig(t, rigOptions{profile: "quectel-rm5xx", fn: net, link: link.Options{Channel: mhi.ChannelIPHW0MBIM, Framing: mbim.NTB{}, MRU: 3500, MTU: 9000}})
	waitRunning(t, net)
	big := udp4(t, 1, 9000)
	if err := net.Send(0, big); err != nil {
		t.Fatal(err)
	}
	var agg [][]byte
	for i := range 23 {
		agg = append(agg, udp4(t, 2+i, 1400))
	}
	if err := net.Send(0, agg...); err != nil {
		t.Fatal(err)
	}
	got := r.snk.waitFor(t, 24, 10*time.Second)
	for i, want := range append([][]byte{big}, agg...) {
		if !bytes.Equal(got[i], want) {
			t.Fatalf("packet %d differs", i)
		}
	}
	// The poller publishes its counts at the end of the pass.
	waitUntil(t, 5*time.Second, "both NTBs counted", func() bool { return r.ep.Stats().RXFrames >= 2 })
	if st := r.ep.Stats(); st.RXFrames != 2 || st.RXErrors != 0 || st.RXDrops != (link.RXDrops{}) {
		t.Errorf("%d frames, %d errors, drops %+v; want 2 frames, nothing dropped", st.RXFrames, st.RXErrors, st.RXDrops)
	}
	p, _ := mhi.Lookup("quectel-rm5xx")
	if p.ChannelMRU(0) != 32768 {
		t.Errorf("quectel-rm5xx MRU %d, want 32768", p.ChannelMRU(0))
	}
}
