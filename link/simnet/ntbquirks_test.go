package simnet

import (
	"errors"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/mhi"
)

// TestNTBQuirksOnEveryEighthNTB: with every NTB quirk on, the 8th NTB
// restarts wSequence at 0, chains its NDP back to itself and carries an
// ARP request besides its IP packets; the 16th repeats the 15th's
// number. Two framers of one network number NTBs as one sequence.
func TestNTBQuirksOnEveryEighthNTB(t *testing.T) {
	num := &dlNumbering{q: NTBQuirks{SequenceGlitches: true, CyclicNDP: true, NonIP: true}}
	frs := []*Framer{NewFramer(mbim.NTB{}, 8, 0), NewFramer(mbim.NTB{}, 8, 0)}
	for _, fr := range frs {
		fr.num = num
	}
	ip := []byte{0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}
	var seqs []uint16
	for i := 1; i <= 16; i++ {
		fr := frs[i%2]
		fr.enc.Begin(fr.buf)
		fr.enc.SetSession(0)
		copy(fr.enc.Add(len(ip)), ip)
		copy(fr.enc.Add(len(ip)), ip)
		ntb := fr.buf[:fr.end(fr.buf)]
		seq, _ := mbim.NTB{}.Sequence(ntb)
		seqs = append(seqs, seq)
		spans, err := mbim.DecodeNTB(ntb, nil)
		odd := i%8 == 0
		if odd != errors.Is(err, framing.ErrBadFrame) {
			t.Errorf("NTB %d: DecodeNTB error %v", i, err)
		}
		want := 2
		if odd {
			want = 3
		}
		if len(spans) != want {
			t.Fatalf("NTB %d: %d datagrams, want %d", i, len(spans), want)
		}
		if odd && ntb[spans[2].Off]>>4 == 4 {
			t.Errorf("NTB %d: the extra datagram is IPv4", i)
		}
	}
	want := []uint16{0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 7, 7}
	for i := range want {
		if seqs[i] != want[i] {
			t.Fatalf("wSequence %v, want %v", seqs, want)
		}
	}
}

// TestProfileNTBQuirks: the Foxconn SDX55 on Qualcomm's ID (the X13s's
// MBIM modem) plays sequence glitches by default; others none.
func TestProfileNTBQuirks(t *testing.T) {
	for name, want := range map[string]NTBQuirks{
		"qcom-sdx55m":     {}, // raw IP on IP_HW0: no NTBs
		"foxconn-sdx55":   {SequenceGlitches: true},
		"quectel-rm5xx":   {},
		"foxconn-t99w640": {},
	} {
		p, ok := mhi.Lookup(name)
		if !ok {
			t.Fatalf("no profile %s", name)
		}
		if got := ProfileNTBQuirks(p); got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
}

// TestParseNTBQuirks: names turn quirks on, String gives them back, an
// unknown name is an error naming the known ones.
func TestParseNTBQuirks(t *testing.T) {
	q, err := ParseNTBQuirks(NTBQuirks{SequenceGlitches: true}, "ntb-cyclic, ntb-non-ip")
	if err != nil || q != (NTBQuirks{SequenceGlitches: true, CyclicNDP: true, NonIP: true}) {
		t.Fatalf("ParseNTBQuirks = %+v, %v", q, err)
	}
	if got := q.String(); got != "ntb-sequence,ntb-cyclic,ntb-non-ip" {
		t.Errorf("String() = %q", got)
	}
	if _, err := ParseNTBQuirks(NTBQuirks{}, "ntb-loop"); err == nil || !strings.Contains(err.Error(), NTBQuirkCyclic) {
		t.Errorf("unknown name: %v", err)
	}
}
