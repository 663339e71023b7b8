package proxy

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func readDatagram(t testing.TB, u *UDPConn) (string, *net.UDPAddr) {
	t.Helper()
	u.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	n, from, err := u.ReadFrom(buf)
	if err != nil {
		t.Fatalf("reading through the association: %v", err)
	}
	return string(buf[:n]), from.(*net.UDPAddr)
}

func TestUDPAssociateRelaysBothWaysToIPsAndNames(t *testing.T) {
	r := newRig(t, nil)
	e4 := udpEcho(t, "udp4", "127.0.0.1:0")
	e6 := udpEcho(t, "udp6", "[::1]:0")
	u, err := r.client().ListenUDP(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()

	a4 := e4.LocalAddr().(*net.UDPAddr)
	a6 := e6.LocalAddr().(*net.UDPAddr)
	if _, err := u.WriteTo([]byte("v4"), a4); err != nil {
		t.Fatal(err)
	}
	if got, from := readDatagram(t, u); got != "echo:v4" || from.AddrPort() != a4.AddrPort() {
		t.Errorf("got %q from %v", got, from)
	}
	u.WriteTo([]byte("v6"), a6)
	if got, from := readDatagram(t, u); got != "echo:v6" || from.AddrPort().Port() != uint16(a6.Port) {
		t.Errorf("got %q from %v", got, from)
	}
	// A name goes through the resolver; the answer comes from its IP.
	u.WriteToAddr([]byte("name"), Addr{Name: "localhost.test", Port: uint16(a4.Port)})
	if got, from := readDatagram(t, u); got != "echo:name" || !from.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("got %q from %v", got, from)
	}
	u.WriteToAddr([]byte("name again"), Addr{Name: "localhost.test", Port: uint16(a4.Port)})
	readDatagram(t, u)
	if n := strings.Count(r.res.lookups(), "localhost.test"); n != 1 {
		t.Errorf("resolver asked %d times for one name, want 1 (cached)", n)
	}
	// A large datagram survives.
	big := strings.Repeat("Q", 1400)
	u.WriteTo([]byte(big), a4)
	if got, _ := readDatagram(t, u); got != "echo:"+big {
		t.Errorf("large datagram: %d bytes back", len(got))
	}
	// v4 echo and v6 echo are two flows; the name maps onto the v4 one.
	// The down counter is added after the datagram is sent, so wait.
	waitFor(t, "UDP counters", func() bool {
		s := r.srv.Stats()
		return s.UDPAssociations == 1 && s.UDPFlows == 2 && s.UDPPacketsUp == 5 && s.UDPPacketsDown == 5
	})
}

func TestUDPAssociationEndsWithItsControlConnection(t *testing.T) {
	r := newRig(t, nil)
	u, err := r.client().ListenUDP(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "one active association", func() bool { return r.srv.Stats().UDPAssociationsActive == 1 })
	u.ctrl.Close()
	waitFor(t, "no active association", func() bool { return r.srv.Stats().UDPAssociationsActive == 0 })
	u.Close()
}

func TestUDPAssociationIdleTimeout(t *testing.T) {
	r := newRig(t, func(s *Server) { s.UDPIdleTimeout = 200 * time.Millisecond })
	u, err := r.client().ListenUDP(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	waitFor(t, "the idle association to close", func() bool { return r.srv.Stats().UDPAssociationsActive == 0 && r.srv.Stats().UDPAssociations == 1 })
	u.ctrl.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := u.ctrl.Read(make([]byte, 1)); err == nil {
		t.Error("control connection still open")
	}
}

func TestUDPAssociationLimits(t *testing.T) {
	r := newRig(t, func(s *Server) { s.MaxAssociations = 1; s.MaxFlowsPerAssociation = 1 })
	e1 := udpEcho(t, "udp4", "127.0.0.1:0")
	e2 := udpEcho(t, "udp4", "127.0.0.1:0")
	u, err := r.client().ListenUDP(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	_, err = r.client().ListenUDP(context.Background())
	if re, ok := err.(*ReplyError); !ok || re.Reply != ReplyGeneralFailure {
		t.Errorf("second association: %v, want general failure", err)
	}
	u.WriteTo([]byte("one"), e1.LocalAddr())
	readDatagram(t, u)
	u.WriteTo([]byte("two"), e2.LocalAddr()) // a second destination: over the limit
	u.WriteTo([]byte("one again"), e1.LocalAddr())
	if got, _ := readDatagram(t, u); got != "echo:one again" {
		t.Errorf("got %q", got)
	}
	s := r.srv.Stats()
	if s.UDPAssociationsRejected != 1 || s.UDPFlowsRejected != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestUDPAssociationDropsStrangersAndUnsolicitedReplies(t *testing.T) {
	r := newRig(t, nil)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	u, err := r.client().ListenUDP(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.WriteTo([]byte("hello"), e.LocalAddr())
	readDatagram(t, u)
	relay := u.pc.RemoteAddr().(*net.UDPAddr)

	// Another local socket using the relay: not the client, dropped.
	other, _ := net.DialUDP("udp", nil, relay)
	defer other.Close()
	other.Write(AppendUDPHeader(nil, Addr{IP: netip.MustParseAddr("127.0.0.1"), Port: uint16(e.LocalAddr().(*net.UDPAddr).Port)}))
	// A malformed header from the client: dropped and counted.
	u.pc.Write([]byte{0, 0, 1, 1, 127, 0, 0, 1, 0, 9}) // FRAG 1
	u.pc.Write([]byte{0, 0})
	waitFor(t, "3 drops", func() bool { return r.srv.Stats().UDPDropped == 3 })
	if got := r.srv.Stats().BadRequests; got != 2 {
		t.Errorf("BadRequests = %d, want 2", got)
	}
	u.WriteTo([]byte("still works"), e.LocalAddr())
	if got, _ := readDatagram(t, u); got != "echo:still works" {
		t.Errorf("got %q", got)
	}
}

func TestUDPAssociateRefusedWithoutAPacketListener(t *testing.T) {
	r := newRig(t, func(s *Server) { s.PacketListener = nil })
	_, err := r.client().ListenUDP(context.Background())
	if re, ok := err.(*ReplyError); !ok || re.Reply != ReplyCommandNotSupported {
		t.Errorf("got %v, want command not supported", err)
	}
}
