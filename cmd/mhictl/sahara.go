package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pairconn"
	"github.com/mhistack/mhistack/mhi/sahara"
	"github.com/mhistack/mhistack/mhi/sim"
)

// mhictl sahara: the host's side of Sahara (mhi/sahara.Host) on the
// SAHARA pair of a modem in its SBL, to load images or to collect the RAM
// dump of an SBL in memory debug mode. docs/FLASHING.md is the user's
// guide.

func init() {
	register(&command{
		Name:  "sahara",
		Short: "Serve images to a modem's SBL (Sahara), or save its RAM dump.",
		Summary: `Bring the modem into its secondary boot loader (SBL) — with -sbl, the boot
ROM loads that file over BHI first — and talk Sahara on the SAHARA channels:
serve each image the SBL reads (READ_DATA / READ_DATA64) from the -image
file of its id until the SBL says DONE, then wait for mission mode (unless
-no-wait). When the SBL instead offers a memory dump (memory debug mode, an
SBL that crashed), -dump DIR collects every region of its debug table into
DIR, one file per region named as the SBL names it (reduced to
[A-Za-z0-9._-]), plus dump.txt listing them, and resets the SBL; without
-dump such an SBL is refused. Existing files are never overwritten.
-device sim emulates a qcom-qdu100 held in its SBL that asks for the -image
files (or, with -dump, offers an emulated RAM dump).`,
		Run: saharaCmd,
	})
}

// imageFlag is -image ID=FILE, repeatable.
type imageFlag map[uint32]string

func (f imageFlag) String() string {
	ids := make([]int, 0, len(f))
	for id := range f {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%d=%s", id, f[uint32(id)]))
	}
	return strings.Join(parts, ",")
}

func (f imageFlag) Set(v string) error {
	ids, file, ok := strings.Cut(v, "=")
	if !ok || file == "" {
		return fmt.Errorf("want ID=FILE, got %q", v)
	}
	id, err := strconv.ParseUint(ids, 0, 32)
	if err != nil {
		return fmt.Errorf("image id %q: want a number (13, 0xd)", ids)
	}
	if _, dup := f[uint32(id)]; dup {
		return fmt.Errorf("image id %d given twice", id)
	}
	f[uint32(id)] = file
	return nil
}

// saharaTxBufs is the number of UL buffers of the SAHARA connection: an
// answer to READ_DATA is one message of up to sahara.DefaultMaxRead bytes
// (17 buffers of pairconn.MaxBufLen), sent as one chained transfer.
const saharaTxBufs = (sahara.DefaultMaxRead+pairconn.MaxBufLen-1)/pairconn.MaxBufLen + 1

// simSaharaProfile is the modem -device sim emulates for mhictl sahara:
// SAHARA is an SBL channel there.
const simSaharaProfile = "qcom-qdu100"

// newSimSahara builds the emulated SBL's Sahara server for -device sim (a
// variable for the tests, which keep it to check what it received).
var newSimSahara = func(images []sim.SaharaImage, dump bool) *sim.Sahara {
	if dump {
		return &sim.Sahara{Dump: simDumpRegions(), TableAddress: 0x8000_0000}
	}
	return &sim.Sahara{Images: images}
}

// simDumpRegions is the emulated SBL's RAM dump: a 192 KiB DDR region in
// several MEMORY_READs and a small one.
func simDumpRegions() []sim.SaharaRegion {
	ddr := make([]byte, 192<<10)
	for i := range ddr {
		ddr[i] = byte(i*31) ^ byte(i>>9)
	}
	imem := []byte("emulated SBL crash: IMEM log\n")
	return []sim.SaharaRegion{
		{Region: sahara.Region{Type: 1, Address: 0x8600_0000, Length: uint64(len(ddr)), Description: "DDR CS0", Filename: "DDRCS0.BIN"}, Data: ddr},
		{Region: sahara.Region{Type: 1, Address: 0x1468_0000, Length: uint64(len(imem)), Description: "IMEM log", Filename: "IMEM.BIN"}, Data: imem},
	}
}

type saharaRegionOut struct {
	Description string `json:"description"`
	Address     uint64 `json:"address"`
	Bytes       uint64 `json:"bytes"`
	File        string `json:"file"`
}

type saharaOut struct {
	Device      string            `json:"device"`
	Profile     string            `json:"profile"`
	Mode        string            `json:"mode"` // "image" or "memory-debug"
	Images      map[string]uint64 `json:"images,omitempty"`
	Regions     []saharaRegionOut `json:"regions,omitempty"`
	DumpDir     string            `json:"dump_dir,omitempty"`
	EE          string            `json:"ee"`
	MissionMode bool              `json:"mission_mode"`
	Seconds     float64           `json:"seconds"`
}

func saharaCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["sahara"]
	fs := newFlagSet(c, "[-device sim|ADDRESS|vfio-user:PATH] [-sbl FILE] [-image ID=FILE ...] [-dump DIR] [flags]", stderr)
	df := addDeviceFlags(fs)
	fs.Lookup("profile").Usage = "modem `profile` (mhi table name): what -device sim impersonates (default " + simSaharaProfile + ", whose SBL has the SAHARA channels); for hardware it overrides matching by PCI IDs"
	images := imageFlag{}
	fs.Var(images, "image", "serve `ID=FILE` when the SBL reads image ID (decimal or 0x hex; repeatable; qdl sends the EDL programmer as 13)")
	sbl := fs.String("sbl", "", "boot `file` the boot ROM loads over BHI to reach the SBL (sbl1.mbn, xbl.elf); omit if the modem is already in its SBL (a built-in stand-in with -device sim)")
	dump := fs.String("dump", "", "`directory` for the memory dump of an SBL in memory debug mode (created if missing)")
	noWait := fs.Bool("no-wait", false, "after the images, do not wait for the modem to reach mission mode")
	quiet := fs.Bool("quiet", false, "no progress lines")
	if err := parseNoArgs(fs, args, df.check); err != nil {
		return err
	}
	if len(images) == 0 && *dump == "" {
		return usagef("name the images with -image ID=FILE, or a -dump DIR for a memory dump")
	}
	if df.device == "sim" && df.profile == "" {
		df.profile = simSaharaProfile
	}
	var simImages []sim.SaharaImage
	for id, name := range images {
		st, err := os.Stat(name)
		if err != nil {
			return fmt.Errorf("image %d: %w", id, err)
		}
		if !st.Mode().IsRegular() || st.Size() == 0 {
			return fmt.Errorf("image %d: %s is empty or not a regular file", id, name)
		}
		simImages = append(simImages, sim.SaharaImage{ID: id, Size: int(min(st.Size(), 1<<31-1))})
	}
	sort.Slice(simImages, func(i, j int) bool { return simImages[i].ID < simImages[j].ID })
	if *dump != "" {
		if err := os.MkdirAll(*dump, 0o755); err != nil {
			return err
		}
	}
	var sblImg []byte
	if *sbl != "" {
		b, err := os.ReadFile(*sbl)
		if err != nil {
			return fmt.Errorf("read the SBL: %w", err)
		}
		if len(b) == 0 {
			return fmt.Errorf("%s is empty; pass the modem's SBL image", *sbl)
		}
		sblImg = b
	} else if df.device == "sim" {
		sblImg = []byte("mhistack emulated SBL\n")
	}

	so := sim.Options{Boot: sim.BootPBL, StayInSBL: true}
	var emulated *sim.Sahara
	if df.device == "sim" {
		p := df.simProfile()
		if _, _, ok := p.ChannelPair("SAHARA"); !ok {
			return fmt.Errorf("profile %s has no SAHARA channels; use one that has (qcom-qdu100)", p.Name)
		}
		emulated = newSimSahara(simImages, *dump != "")
		so.Functions = map[string]sim.Function{"SAHARA": emulated}
	}
	// pairconn's buffers: its RX ones and saharaTxBufs TX ones.
	extra := (pairconn.DefaultRxBufs + saharaTxBufs) * mhi.DMAFootprint(pairconn.MaxBufLen, 64)
	t, err := df.open(so, mhi.Options{Boot: mhi.BootOptions{Image: sblImg}}, mhi.DMAUse{Firmware: len(sblImg)}, extra)
	if err != nil {
		return err
	}
	defer t.close()
	if _, _, ok := t.c.Profile().ChannelPair("SAHARA"); !ok {
		return fmt.Errorf("profile %s has no SAHARA channels; Sahara cannot be reached over MHI on this modem", t.c.Profile().Name)
	}
	ctx, cancel := df.context(ctx)
	defer cancel()
	start := time.Now()

	// The power-up runs until mission mode; the SBL is reached on the way.
	upCtx, stopUp := context.WithCancel(ctx)
	up := make(chan error, 1)
	go func() { up <- t.c.PowerUp(upCtx) }()
	upDone := false
	defer func() {
		stopUp()
		if !upDone {
			<-up
		}
	}()
	if err := waitSBL(ctx, t.c, up, &upDone); err != nil {
		return err
	}
	conn, err := pairconn.Open(ctx, t.c, t.dev.DMA(), "SAHARA", pairconn.Options{TxBufs: saharaTxBufs})
	if err != nil {
		return hint(fmt.Errorf("open SAHARA: %w", err))
	}
	defer conn.Close()

	progress := io.Discard
	if !*quiet {
		progress = stderr
	}
	out := saharaOut{Device: df.device, Profile: t.c.Profile().Name, DumpDir: *dump}
	// One READ_DATA answer is one transfer: no larger than the pair carries.
	h := &sahara.Host{Images: images, OnProgress: imageProgress(progress, images), MaxRead: uint64(min(conn.MaxSend(), sahara.DefaultMaxRead))}
	if *dump != "" {
		d := &dumpWriter{dir: *dump, w: progress, taken: map[string]bool{"dump.txt": true}}
		h.OnRegion = func(r sahara.Region, data []byte) error {
			ro, err := d.write(r, data)
			if err == nil {
				out.Regions = append(out.Regions, ro)
			}
			return err
		}
		defer d.close(&out)
	}
	res, err := h.Run(ctx, conn)
	if err != nil {
		if errors.Is(err, sahara.ErrNoDump) {
			return fmt.Errorf("%w: the SBL crashed and offers its RAM; run again with -dump DIR to collect it", err)
		}
		if errors.Is(err, sahara.ErrUnknownImage) {
			return fmt.Errorf("%w; pass it with -image ID=FILE", err)
		}
		return err
	}
	switch res.Mode {
	case sahara.ModeMemoryDebug:
		out.Mode = "memory-debug"
	default:
		out.Mode = "image"
		out.Images = map[string]uint64{}
		for id, n := range res.Served {
			out.Images[strconv.FormatUint(uint64(id), 10)] = n
		}
		if !*noWait {
			if t.modem != nil {
				// The emulated SBL was held for Sahara; now it boots on.
				if err := t.modem.LeaveSBL(); err != nil {
					return err
				}
			}
			upDone = true
			if err := <-up; err != nil {
				return hint(fmt.Errorf("after Sahara, waiting for mission mode: %w (use -no-wait to stop after the images)", err))
			}
		}
	}
	if emulated != nil {
		if err := emulated.Err(); err != nil {
			return fmt.Errorf("the emulated SBL saw a host error: %w", err)
		}
	}
	_, ee, mission := t.c.State()
	out.EE, out.MissionMode, out.Seconds = ee.String(), mission, time.Since(start).Seconds()
	if df.json {
		return writeJSON(stdout, out)
	}
	if out.Mode == "image" {
		var parts []string
		for _, id := range sortedIDs(res.Served) {
			parts = append(parts, fmt.Sprintf("image %d: %d bytes", id, res.Served[id]))
		}
		fmt.Fprintf(stdout, "sahara: served %s in %.2f s; modem in EE %s, mission mode %v\n", strings.Join(parts, ", "), out.Seconds, out.EE, out.MissionMode)
		return nil
	}
	var total uint64
	for _, r := range out.Regions {
		total += r.Bytes
	}
	fmt.Fprintf(stdout, "sahara: memory dump of %d regions (%d bytes) in %s in %.2f s; SBL reset\n", len(out.Regions), total, *dump, out.Seconds)
	return nil
}

// waitSBL waits until the modem is in M0 in its SBL. up reports the
// power-up's end: before the SBL, that is its failure or a modem that
// went past the SBL without Sahara.
func waitSBL(ctx context.Context, c *mhi.Controller, up <-chan error, upDone *bool) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, ee, _ := c.State(); st == mhi.StateM0 && ee == mhi.EESBL {
			return nil
		}
		select {
		case err := <-up:
			*upDone = true
			if err != nil {
				return hint(fmt.Errorf("waiting for the SBL: %w", err))
			}
			_, ee, _ := c.State()
			return fmt.Errorf("the modem reached EE %s without stopping in its SBL: nothing asks for Sahara", ee)
		case <-ctx.Done():
			st, ee, _ := c.State()
			return fmt.Errorf("waiting for the SBL (state %v, EE %v): %w; pass -sbl FILE if the modem waits in its boot ROM", st, ee, ctx.Err())
		case <-tick.C:
		}
	}
}

// imageProgress prints each image's progress at each quarter of its file.
func imageProgress(w io.Writer, images imageFlag) func(id uint32, off, n uint64) {
	if w == io.Discard {
		return nil
	}
	sizes := map[uint32]int64{}
	for id, name := range images {
		if st, err := os.Stat(name); err == nil {
			sizes[id] = st.Size()
		}
	}
	served := map[uint32]uint64{}
	quarter := map[uint32]uint64{}
	return func(id uint32, _, n uint64) {
		served[id] += n
		size := uint64(max(sizes[id], 1))
		if q := 4 * served[id] / size; q > quarter[id] || served[id] == n {
			quarter[id] = q
			fmt.Fprintf(w, "image %d (%s): %d/%d bytes read by the SBL\n", id, filepath.Base(images[id]), served[id], size)
		}
	}
}

// dumpWriter writes a dump's regions into dir, never over an existing
// file, and lists them in dump.txt.
type dumpWriter struct {
	dir   string
	w     io.Writer
	taken map[string]bool
}

func (d *dumpWriter) write(r sahara.Region, data []byte) (saharaRegionOut, error) {
	base := sahara.SanitizeFilename(r.Filename)
	name := base
	for i := 1; d.taken[name]; i++ {
		name = fmt.Sprintf("%s.%d", base, i)
	}
	d.taken[name] = true
	f, err := os.OpenFile(filepath.Join(d.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return saharaRegionOut{}, fmt.Errorf("dump region %q: %w (use an empty -dump directory)", r.Description, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return saharaRegionOut{}, fmt.Errorf("dump region %q: %w", r.Description, err)
	}
	fmt.Fprintf(d.w, "region %q at %#x: %d bytes -> %s\n", r.Description, r.Address, len(data), name)
	return saharaRegionOut{Description: r.Description, Address: r.Address, Bytes: uint64(len(data)), File: name}, nil
}

// close writes dump.txt for the regions collected (also after a failure
// part-way, so that what was saved is listed).
func (d *dumpWriter) close(out *saharaOut) {
	if len(out.Regions) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# file\taddress\tbytes\tdescription\n")
	for _, r := range out.Regions {
		fmt.Fprintf(&b, "%s\t%#x\t%d\t%s\n", r.File, r.Address, r.Bytes, r.Description)
	}
	f, err := os.OpenFile(filepath.Join(d.dir, "dump.txt"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		_, err = f.WriteString(b.String())
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		fmt.Fprintf(d.w, "dump.txt: %v\n", err)
	}
}

func sortedIDs(m map[uint32]uint64) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
