package link_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi/sim"
)

// tapLoopback sends 40 packets of every kind (20 IPv4, 20 IPv6) through
// the emulated modem's loopback with a tap on the endpoint and returns
// the pcap file and the packets: each is in the file twice (TX and RX).
func tapLoopback(t *testing.T) (string, [][]byte) {
	t.Helper()
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true}})
	path := filepath.Join(t.TempDir(), "link.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tap, err := link.NewTap(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.ep.SetTap(tap)
	rng := rand.New(rand.NewPCG(5, 6))
	pkts, _ := mixed(t, rng, 40, 300)
	write(t, r.ep, pkts...)
	r.snk.waitFor(t, len(pkts), 5*time.Second)
	r.ep.SetTap(nil)
	if err := errors.Join(tap.Stop(), f.Close()); err != nil {
		t.Fatal(err)
	}
	if tap.Packets() != 80 {
		t.Fatalf("tap wrote %d packets, want 80", tap.Packets())
	}
	return path, pkts
}

// readPcap returns the records of a pcap stream, checking the link type
// (RAW) and each record's lengths against snaplen.
func readPcap(t *testing.T, r io.Reader, snaplen int) (data [][]byte, lengths []int) {
	t.Helper()
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	if lt := pr.LinkType(); lt != layers.LinkTypeRaw {
		t.Errorf("link type %v, want RAW (101)", lt)
	}
	if s := pr.Snaplen(); s != uint32(snaplen) {
		t.Errorf("snaplen %d, want %d", s, snaplen)
	}
	for {
		b, ci, err := pr.ReadPacketData()
		if err == io.EOF {
			return data, lengths
		}
		if err != nil {
			t.Fatalf("record %d: %v", len(data), err)
		}
		if ci.CaptureLength != min(ci.Length, snaplen) {
			t.Errorf("record %d: capture length %d of %d (snaplen %d)", len(data), ci.CaptureLength, ci.Length, snaplen)
		}
		data, lengths = append(data, b), append(lengths, ci.Length)
	}
}

func TestPcapTapWritesBothDirections(t *testing.T) {
	path, pkts := tapLoopback(t)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, _ := readPcap(t, f, 65535)
	seen := map[string]int{}
	for _, r := range recs {
		seen[string(r)]++
	}
	for i, p := range pkts {
		if seen[string(p)] != 2 {
			t.Errorf("packet %d is in the capture %d times, want 2 (TX and RX)", i, seen[string(p)])
		}
	}
	if len(recs) != 2*len(pkts) {
		t.Errorf("%d records, want %d", len(recs), 2*len(pkts))
	}
}

func TestPcapTapIsReadByTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("MHISTACK_REQUIRE_TSHARK") == "1" {
			t.Fatalf("tshark not found (apt-get install tshark): %v", err)
		}
		t.Skip("tshark not installed (apt-get install tshark); CI installs it and sets MHISTACK_REQUIRE_TSHARK=1")
	}
	path, _ := tapLoopback(t)
	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "ip.version", "-e", "ipv6.version", "-e", "udp.srcport", "-e", "tcp.srcport").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark -r: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "Running as") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 80 {
		t.Fatalf("tshark read %d packets, want 80:\n%s", len(lines), out)
	}
	var v4, v6 int
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "4"):
			v4++
		case strings.Contains(l, "6"):
			v6++
		}
	}
	if v4 != 40 || v6 != 40 {
		t.Errorf("tshark saw %d IPv4 and %d IPv6 packets, want 40 each:\n%s", v4, v6, out)
	}
}

// gsoLikePacket returns an outgoing packet as gVisor builds one: the
// IP header pushed into the reserved header space, the payload in
// views of its own.
func gsoLikePacket(t *testing.T) (*stack.PacketBuffer, []byte) {
	t.Helper()
	whole := udp4(t, 7, 900)
	var payload buffer.Buffer
	payload.Append(buffer.NewViewWithData(whole[20:300]))
	payload.Append(buffer.NewViewWithData(whole[300:]))
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 64, Payload: payload})
	copy(pkt.NetworkHeader().Push(20), whole[:20])
	return pkt, whole
}

func TestPcapTapRecordsPacketBuffersAndSlicesCutToSnaplen(t *testing.T) {
	pkt, whole := gsoLikePacket(t)
	defer pkt.DecRef()
	for _, snaplen := range []int{65535, 100, 20, 1} {
		var b bytes.Buffer
		tap, err := link.NewTap(&b, snaplen)
		if err != nil {
			t.Fatal(err)
		}
		tap.WritePacketBuffer(pkt)
		link.TapWriteForTest(tap, whole)
		if err := tap.Stop(); err != nil || tap.Packets() != 2 {
			t.Fatalf("snaplen %d: %d packets, %v", snaplen, tap.Packets(), err)
		}
		tap.WritePacketBuffer(pkt) // after Stop: not written
		recs, lengths := readPcap(t, &b, snaplen)
		if len(recs) != 2 {
			t.Fatalf("snaplen %d: %d records, want 2", snaplen, len(recs))
		}
		want := whole[:min(len(whole), snaplen)]
		for i, r := range recs {
			if !bytes.Equal(r, want) || lengths[i] != len(whole) {
				t.Errorf("snaplen %d record %d: %d of %d bytes %x, want %d of %d", snaplen, i, len(r), lengths[i], r[:min(len(r), 24)], len(want), len(whole))
			}
		}
	}
}

func TestPcapTapDoesNotAllocatePerPacket(t *testing.T) {
	if underRace {
		t.Skip("the race detector's instrumentation allocates")
	}
	pkt, whole := gsoLikePacket(t)
	defer pkt.DecRef()
	tap, err := link.NewTap(io.Discard, 0)
	if err != nil {
		t.Fatal(err)
	}
	tap.WritePacketBuffer(pkt) // sizes the copy buffer
	if n := testing.AllocsPerRun(200, func() {
		tap.WritePacketBuffer(pkt)
		link.TapWriteForTest(tap, whole)
	}); n != 0 {
		t.Errorf("%v allocations per two packets, want 0", n)
	}
}

// failAfter accepts n bytes, then fails every write with errFull.
type failAfter struct{ n, writes int }

var errFull = errors.New("disk full")

func (f *failAfter) Write(b []byte) (int, error) {
	f.writes++
	if len(b) > f.n {
		k := f.n
		f.n = 0
		return k, errFull
	}
	f.n -= len(b)
	return len(b), nil
}

func TestPcapTapKeepsTheFirstWriteErrorAndStopsWriting(t *testing.T) {
	if _, err := link.NewTap(&failAfter{n: 10}, 0); !errors.Is(err, errFull) {
		t.Errorf("NewTap on a failing writer: %v, want %v", err, errFull)
	}
	pkt, whole := gsoLikePacket(t)
	defer pkt.DecRef()
	// Room for the file header, one record and the next record's header:
	// the third packet's body fails.
	w := &failAfter{n: 24 + 16 + len(whole) + 16}
	tap, err := link.NewTap(w, 0)
	if err != nil {
		t.Fatal(err)
	}
	link.TapWriteForTest(tap, whole)
	tap.WritePacketBuffer(pkt)
	writes := w.writes
	link.TapWriteForTest(tap, whole)
	tap.WritePacketBuffer(pkt)
	if w.writes != writes {
		t.Errorf("%d writes after the error", w.writes-writes)
	}
	if tap.Packets() != 1 || !errors.Is(tap.Err(), errFull) {
		t.Errorf("%d packets, Err %v; want 1 and %v", tap.Packets(), tap.Err(), errFull)
	}
	if err := tap.Stop(); err != errFull {
		t.Errorf("Stop = %v, want the writer's own error %v", err, errFull)
	}
}
