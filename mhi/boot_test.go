package mhi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/sim"
)

// bootImage is a test image whose bytes differ at every offset that a
// segment boundary could shift.
func bootImage(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + i>>8)
	}
	return b
}

// progressLog collects Progress reports.
type progressLog struct {
	mu sync.Mutex
	ps []mhi.Progress
}

func (l *progressLog) add(p mhi.Progress) {
	l.mu.Lock()
	l.ps = append(l.ps, p)
	l.mu.Unlock()
}

func (l *progressLog) phases() []mhi.Progress {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]mhi.Progress(nil), l.ps...)
}

func TestBHIeVectorTableDeliversTheImageByteExact(t *testing.T) {
	r := newRig(t, "qcom-sdx55m", sim.Options{Boot: sim.BootPBL}, mhi.Options{})
	img := bootImage(10*4096 + 123) // last segment partial
	var log progressLog
	err := r.c.LoadBHIe(context.Background(), img, mhi.BHIeOptions{SegLen: 4096, OnProgress: log.add})
	if err != nil {
		t.Fatalf("LoadBHIe: %v", err)
	}
	got := r.m.BHIeImage()
	if !bytes.Equal(got.Data, img) {
		t.Fatalf("device received %d bytes, want the %d-byte image byte-exact (first difference at %d)", len(got.Data), len(img), firstDiff(got.Data, img))
	}
	if got.Session == 0 || got.Session&^mhi.BHIESeqMask != 0 {
		t.Errorf("TXVECDB sequence %#x: want random, non-zero, 30 bits", got.Session)
	}
	ps := log.phases()
	if len(ps) != 12 {
		t.Fatalf("%d progress reports, want one per segment (11) and the completion: %+v", len(ps), ps)
	}
	for i, p := range ps[:11] {
		if p.Phase != mhi.PhaseBHIe || p.Complete || p.Total != len(img) || p.Done != min((i+1)*4096, len(img)) {
			t.Errorf("progress %d = %+v", i, p)
		}
	}
	if last := ps[11]; !last.Complete || last.Done != len(img) {
		t.Errorf("last progress = %+v, want complete", last)
	}
}

func TestBHIeErrorIsSurfaced(t *testing.T) {
	r := newRig(t, "qcom-sdx55m", sim.Options{Boot: sim.BootPBL}, mhi.Options{})
	r.m.FailNextBHIe()
	err := r.c.LoadBHIe(context.Background(), bootImage(5000), mhi.BHIeOptions{SegLen: 1024})
	if !errors.Is(err, mhi.ErrFirmware) {
		t.Fatalf("LoadBHIe = %v, want ErrFirmware", err)
	}
	if !strings.Contains(err.Error(), "status 3") {
		t.Errorf("error %q does not name the device's TXVECSTATUS error", err)
	}
	// The device is not stuck: a second attempt succeeds.
	if err := r.c.LoadBHIe(context.Background(), bootImage(5000), mhi.BHIeOptions{SegLen: 1024}); err != nil {
		t.Fatalf("second LoadBHIe: %v", err)
	}
}

func TestBHITimesOutWhenTheDeviceNeverAnswers(t *testing.T) {
	// A device in AMSS has no boot ROM listening to BHI_IMGTXDB.
	var violations sync.Map
	r := newRig(t, "qcom-sdx55m", sim.Options{OnViolation: func(err error) { violations.Store(err.Error(), true) }},
		mhi.Options{Timeout: 200 * time.Millisecond})
	start := time.Now()
	err := r.c.LoadBHI(context.Background(), []byte("image"))
	if !errors.Is(err, mhi.ErrTimeout) {
		t.Fatalf("LoadBHI = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("timed out after %v, want about the 200 ms timeout", d)
	}
}

func TestFullBootChainSendsSBLOverBHIAndTheWholeImageOverBHIe(t *testing.T) {
	img := bootImage(64<<10 + 7)
	var log progressLog
	r := newRig(t, "qcom-sdx55m", sim.Options{Boot: sim.BootPBL}, mhi.Options{
		Firmware: func(string) ([]byte, error) { return img, nil },
		Boot:     mhi.BootOptions{FullBootChain: true, SBLSize: 8192, SegLen: 16 << 10, OnProgress: log.add},
	})
	r.m.SetFullBootChain(true)
	r.powerUp()
	if _, ee, mission := r.c.State(); ee != mhi.EEAMSS || !mission {
		t.Fatalf("after full-boot-chain power-up: ee %s mission %v", ee, mission)
	}
	if got := r.m.BHIImage(); !bytes.Equal(got.Data, img[:8192]) {
		t.Errorf("BHI carried %d bytes, want the first 8192 (sbl_size)", len(got.Data))
	}
	if got := r.m.BHIeImage(); got.SHA256 != sha256.Sum256(img) {
		t.Errorf("BHIe carried %d bytes, want the whole %d-byte image", got.Size, len(img))
	}
	var bhi, bhie bool
	for _, p := range log.phases() {
		bhi = bhi || p.Phase == mhi.PhaseBHI && p.Complete
		bhie = bhie || p.Phase == mhi.PhaseBHIe && p.Complete
	}
	if !bhi || !bhie {
		t.Errorf("progress reported BHI complete %v, BHIe complete %v; want both", bhi, bhie)
	}
}

func TestFullBootChainSBLWaitsForBHIeUntilTheProfileTimeout(t *testing.T) {
	// The host does not know the modem wants full-boot-chain: the SBL
	// waits for an image that never comes and power-up times out after
	// the profile's timeout.
	p := *profile(t, "qcom-sdx55m")
	p.Timeout = 300 * time.Millisecond
	r := newRigProfile(t, &p, sim.Options{Boot: sim.BootPBL}, mhi.Options{
		Firmware: func(string) ([]byte, error) { return bootImage(4096), nil },
	})
	r.m.SetFullBootChain(true)
	err := r.c.PowerUp(context.Background())
	if !errors.Is(err, mhi.ErrTimeout) || !strings.Contains(err.Error(), "mission mode") {
		t.Fatalf("PowerUp = %v, want ErrTimeout waiting for mission mode", err)
	}
	if _, ee := r.m.State(); ee != mhi.EESBL {
		t.Errorf("device in EE %s, want it still waiting in SBL", ee)
	}
}

func TestEnterEDLReachesFlashProgrammerAndFirehoseCarriesTraffic(t *testing.T) {
	fh := &sim.Firehose{}
	var log progressLog
	r := newRig(t, "foxconn-sdx55", sim.Options{Functions: map[string]sim.Function{"FIREHOSE": fh}},
		mhi.Options{Boot: mhi.BootOptions{OnProgress: log.add}})
	r.powerUp()
	// In AMSS the FIREHOSE channels are not available.
	if ch, err := r.c.Channel(34, mhi.ChannelOptions{}); err != nil {
		t.Fatal(err)
	} else if err := ch.Start(context.Background()); !errors.Is(err, mhi.ErrState) {
		t.Fatalf("FIREHOSE start in AMSS = %v, want ErrState", err)
	}
	prog := bootImage(20000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.EnterEDL(ctx, prog); err != nil {
		t.Fatalf("EnterEDL: %v", err)
	}
	if st, ee, mission := r.c.State(); ee != mhi.EEFP || !mission || st != mhi.StateM0 {
		t.Fatalf("host after EnterEDL: %s/%s mission %v, want M0/FP in mission mode", st, ee, mission)
	}
	if st, ee := r.m.State(); st != mhi.StateM0 || ee != mhi.EEFP {
		t.Fatalf("device after EnterEDL: %s/%s", st, ee)
	}
	if n := r.m.EDLEntries(); n != 1 {
		t.Errorf("device entered EDL %d times, want 1", n)
	}
	if got := r.m.BHIImage(); !bytes.Equal(got.Data, prog) {
		t.Errorf("flash programmer: device received %d bytes, want %d byte-exact", len(got.Data), len(prog))
	}
	l := newLoop(r, "FIREHOSE", 4096, 8, 8)
	req := []byte(`<?xml version="1.0" ?><data><nop /></data>`)
	if err := l.send(ctx, req); err != nil {
		t.Fatal(err)
	}
	got, err := l.recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sim.FirehoseACK) {
		t.Fatalf("FIREHOSE answered %q, want ACK", got)
	}
	var phases []mhi.Phase
	for _, p := range log.phases() {
		phases = append(phases, p.Phase)
	}
	want := []mhi.Phase{mhi.PhaseEDL, mhi.PhaseBHI, mhi.PhaseBHI, mhi.PhaseFP}
	if len(phases) != len(want) || phases[0] != want[0] || phases[len(phases)-1] != mhi.PhaseFP {
		t.Errorf("progress phases %v, want %v", phases, want)
	}
}

func TestEnterEDLFromAFreshControllerWithoutPowerUp(t *testing.T) {
	r := newRig(t, "qcom-sdx55m", sim.Options{Functions: map[string]sim.Function{"FIREHOSE": &sim.Loopback{}}}, mhi.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.EnterEDL(ctx, bootImage(1000)); err != nil {
		t.Fatalf("EnterEDL: %v", err)
	}
	l := newLoop(r, "FIREHOSE", 1024, 4, 4)
	l.exchange(t, rand.New(rand.NewPCG(1, 2)), 20, 3000)
}

// A second EnterEDL finds the programmer the first started still running
// (EE FP, after the power-down between them) and powers it up as it is:
// no SoC reset, no EDL entry, no download; FIREHOSE carries traffic.
func TestEnterEDLSkipsTheProgrammerLoadWhenItAlreadyRuns(t *testing.T) {
	r := newRig(t, "qcom-sdx55m", sim.Options{Functions: map[string]sim.Function{"FIREHOSE": &sim.Loopback{}}}, mhi.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.EnterEDL(ctx, bootImage(1000)); err != nil {
		t.Fatalf("EnterEDL: %v", err)
	}
	if r.c.FPSkipped() {
		t.Fatal("the first EnterEDL says it skipped the load")
	}
	if err := r.c.PowerDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.c.EnterEDL(ctx, bootImage(2000)); err != nil {
		t.Fatalf("second EnterEDL: %v", err)
	}
	if n, got := r.m.EDLEntries(), len(r.m.BHIImage().Data); n != 1 || got != 1000 || !r.c.FPSkipped() {
		t.Errorf("%d EDL entries, last image %d bytes, skipped %v; want 1, the first programmer's 1000, true", n, got, r.c.FPSkipped())
	}
	if st, ee, mission := r.c.State(); ee != mhi.EEFP || !mission || st != mhi.StateM0 {
		t.Fatalf("host after the second EnterEDL: %s/%s mission %v, want M0/FP in mission mode", st, ee, mission)
	}
	l := newLoop(r, "FIREHOSE", 1024, 4, 4)
	l.exchange(t, rand.New(rand.NewPCG(3, 4)), 20, 3000)
}

func TestEnterEDLRefusedWithoutTrigger(t *testing.T) {
	r := newRig(t, "cinterion-mv31", sim.Options{}, mhi.Options{})
	err := r.c.EnterEDL(context.Background(), []byte("prog"))
	if !errors.Is(err, mhi.ErrState) {
		t.Fatalf("EnterEDL on a profile without EDL trigger = %v, want ErrState", err)
	}
}

func TestEnterEDLTimesOutWhenTheModemIgnoresTheCookie(t *testing.T) {
	// The host believes in the trigger, the modem does not have it: it
	// comes back from the SoC reset in AMSS and the wait for EDL ends
	// after the profile timeout.
	p := *profile(t, "cinterion-mv31")
	p.Timeout = 300 * time.Millisecond
	r := newRigProfile(t, &p, sim.Options{}, mhi.Options{})
	hostProfile := p
	hostProfile.EDLTrigger = true
	c, err := mhi.New(r.dev, mhi.Options{Profile: &hostProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.EnterEDL(context.Background(), []byte("prog"))
	if !errors.Is(err, mhi.ErrTimeout) || !strings.Contains(err.Error(), "AMSS") {
		t.Fatalf("EnterEDL = %v, want ErrTimeout naming the EE the device is in", err)
	}
}

// A SoC reset clears the function's config space like hardware does (BARs
// and Command register zeroed): EnterEDL must restore what New saved, not
// only bus mastering, or the registers never decode again and the BARs
// the platform assigned are gone.
func TestEnterEDLRestoresConfigSpaceAfterSoCReset(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{Functions: map[string]sim.Function{"FIREHOSE": &sim.Loopback{}}}, mhi.Options{})
	const bar0 = 0xfe200000 // as the platform firmware assigned it
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], bar0)
	if err := r.dev.ConfigWrite(pci.CfgBAR0, b[:]); err != nil {
		t.Fatal(err)
	}
	c, err := mhi.New(r.dev, mhi.Options{Profile: r.p, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readCfg := func(off, n int) uint32 {
		t.Helper()
		var v [4]byte
		if err := r.dev.ConfigRead(off, v[:n]); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint32(v[:])
	}
	// New turns memory decoding on and leaves bus mastering off until
	// PowerUp has reset a device left running (takeover_test.go); EDL's
	// power-up turns it on.
	cmd := readCfg(pci.CfgCommand, 2)
	if cmd&(pci.CmdMemory|pci.CmdBusMaster) != pci.CmdMemory {
		t.Fatalf("command register %#x after New, want memory on, bus master off", cmd)
	}
	cmd |= pci.CmdBusMaster
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.EnterEDL(ctx, bootImage(1000)); err != nil {
		t.Fatalf("EnterEDL: %v", err)
	}
	if got := readCfg(pci.CfgBAR0, 4); got != bar0 {
		t.Errorf("BAR0 after the SoC reset = %#x, want %#x restored", got, bar0)
	}
	if got := readCfg(pci.CfgCommand, 2); got != cmd {
		t.Errorf("command register after the SoC reset = %#x, want %#x restored", got, cmd)
	}
	if n := r.m.EDLEntries(); n != 1 {
		t.Errorf("device entered EDL %d times, want 1", n)
	}
	ul, dl, err := c.ChannelPair("FIREHOSE", mhi.ChannelOptions{}, mhi.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ul.Start(ctx); err != nil {
		t.Fatalf("FIREHOSE UL start after EDL: %v", err)
	}
	if err := dl.Start(ctx); err != nil {
		t.Fatalf("FIREHOSE DL start after EDL: %v", err)
	}
}
