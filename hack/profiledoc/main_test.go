package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/mhi"
)

func readDoc(t *testing.T) []byte {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", Doc))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestProtocolDocIsCurrent fails when docs/PROTOCOL.md's modem table is
// not what `go run ./hack/profiledoc -w` writes from mhi.Profiles now.
func TestProtocolDocIsCurrent(t *testing.T) {
	if err := Check(readDoc(t), mhi.Profiles()); err != nil {
		t.Error(err)
	}
}

// TestCheckFailsOnAStaleTable proves the test above can fail: the
// document, left as it is, is stale against a table with one fact
// changed, one modem fewer or one more.
func TestCheckFailsOnAStaleTable(t *testing.T) {
	doc := readDoc(t)
	ps := mhi.Profiles()
	changed := *ps[len(ps)-1]
	changed.MRU++
	extra := *ps[0]
	extra.Name = "example-modem"
	for name, input := range map[string][]*mhi.Profile{
		"one MRU changed": append(ps[:len(ps)-1:len(ps)-1], &changed),
		"one modem fewer": ps[1:],
		"one modem more":  append(ps[:len(ps):len(ps)], &extra),
	} {
		if err := Check(doc, input); err == nil || !strings.Contains(err.Error(), "stale") {
			t.Errorf("%s: Check = %v, want a stale-table error", name, err)
		}
	}
}

// TestRenderCountsAndLayouts: the counts come from the input, and modems
// with equal channel and event ring tables share a layout named after the
// first of them.
func TestRenderCountsAndLayouts(t *testing.T) {
	a, _ := mhi.Lookup("cinterion-mv31")
	b, _ := mhi.Lookup("cinterion-mv32")
	c, _ := mhi.Lookup("sierra-em919x")
	s := Render([]*mhi.Profile{a, b, c})
	for _, want := range []string{
		"3 modems, 6 PCI ID entries, 2 channel layouts.",
		"| cinterion-mv32 | Cinterion MV32-WA / MV32-WB | 1269:00ba, 1269:00bb | cinterion-mv31 | 32768 | 20 s | — | — | — | no | no |",
		"| cinterion-mv31 | cinterion-mv31, cinterion-mv32 | 0/1 LOOPBACK (64, ER0); 12/13 MBIM (64, ER0); 100/101 IP_HW0_MBIM (512, ER2/ER3, burst) |",
		"2/3 SAHARA (32/256, ER0, EE SBL)",
		"ER1 HW_DATA 2048 (ch 100)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("Render lacks %q:\n%s", want, s)
		}
	}
	if !strings.HasPrefix(s, Begin+"\n") || !strings.HasSuffix(s, End+"\n") {
		t.Errorf("Render is not delimited by the markers:\n%s", s)
	}
}
