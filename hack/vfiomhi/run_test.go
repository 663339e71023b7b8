package main

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/firehose"
)

// Only a refusal for bus mastering off, inside a window the harness
// opened (kill -9, unplug), is forgiven.
func TestJudgeFaultsForgivesBusMasterOffOnlyInsideAWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	log := `time=2026-12-01T15:00:10.000Z level=WARN msg="DMA refused" part=vfio-user fault="vpci: DMA fault: write of 16 bytes at IOVA 0x1000: bus master disabled"
time=2026-12-01T15:00:10.500Z level=WARN msg="DMA refused" part=vfio-user fault="vpci: DMA fault: write of 16 bytes at IOVA 0x9000: unmapped"
time=2026-12-01T15:00:30.000Z level=WARN msg="DMA refused" part=vfio-user fault="vpci: DMA fault: write of 16 bytes at IOVA 0x1000: bus master disabled"
time=2026-12-01T15:01:00.000Z level=WARN msg="DMA refused" part=vfio-user fault="vpci: DMA fault: read of 4 bytes at IOVA 0x2000: bus master disabled"
`
	windows := []window{{name: "kill9", begin: t0.Add(9 * time.Second), end: t0.Add(12 * time.Second)}, {name: "unplug", begin: t0.Add(55 * time.Second)}}
	tolerated, other := judgeFaults(log, windows)
	if len(tolerated) != 2 || tolerated[0] != "kill9" || tolerated[1] != "unplug" {
		t.Errorf("tolerated %q", tolerated)
	}
	if len(other) != 2 {
		t.Errorf("other %q: want the unmapped one and the bus-master one outside every window", other)
	}
}

// The carrier goes on the data pair mhiproxy's stack.Open uses
// (mhi.Profile.DataPath), with the framing its session speaks there.
func TestCarrierFunctionFollowsTheDataPath(t *testing.T) {
	for profile, want := range map[string]string{
		"qcom-sdx55m":      "IP_HW0=carrier",
		"foxconn-t99w175":  "IP_HW0_MBIM=carrier",
		"sierra-em919x":    "IP_HW0=carrier",
		"telit-fn980-hwv1": "IP_HW0=carrier-qmap5",
	} {
		p, ok := mhi.Lookup(profile)
		if !ok {
			t.Fatalf("no profile %s", profile)
		}
		if got, err := carrierFunction(p); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", profile, got, err, want)
		}
	}
	p, _ := mhi.Lookup("qcom-qdu100")
	q := *p
	q.Channels = nil
	if got, err := carrierFunction(&q); err == nil {
		t.Errorf("a profile without a data pair: %q", got)
	}
}

// The flash run's read-backs are whole partitions of the set, and the
// set parses as mhictl reads it.
func TestFlashSetReadBacksCoverEachPartition(t *testing.T) {
	files, want := flashSet()
	progs, err := firehose.ParseRawprogram(files["flash/rawprogram0.xml"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := firehose.ParsePatches(files["flash/patch0.xml"]); err != nil {
		t.Fatal(err)
	}
	if len(progs) != len(want) {
		t.Fatalf("%d programs, %d read-backs", len(progs), len(want))
	}
	for _, p := range progs {
		w, ok := want[fmt.Sprintf("LUN%d_%s.bin", p.LUN, p.Label)]
		if !ok || uint64(len(w)) != p.NumSectors*uint64(p.SectorSize) || !bytes.HasPrefix(w[:16], files["flash/"+p.Filename][:16]) {
			t.Errorf("%s: read-back of %d bytes (found %v), want %d starting like %s", p.Label, len(w), ok, p.NumSectors*uint64(p.SectorSize), p.Filename)
		}
	}
}
