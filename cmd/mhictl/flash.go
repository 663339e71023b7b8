package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/firehose"
	"github.com/mhistack/mhistack/mhi/pairconn"
	"github.com/mhistack/mhistack/mhi/sim"
)

// mhictl flash and mhictl backup: a rawprogram/patch set written through
// the modem's flash programmer (EDL → EE FP → Firehose on FIREHOSE), and
// the backup of the partitions such a set would overwrite. docs/FLASHING.md
// is the user's guide.

func init() {
	register(&command{
		Name:  "flash",
		Short: "Write a rawprogram/patch set to flash (EDL, Firehose).",
		Summary: `Force the modem into EDL, load the flash programmer (-programmer) over BHI,
and write the partitions of the rawprogram*.xml files (images from -images,
default the directory of the first one), then apply the patch*.xml patches
of the disk (GPT sizes and CRCs) and make the boot loader's LUN bootable,
in qdl's order. Writing the wrong image can leave a modem that does not
boot; flash therefore refuses to write unless -backup names a backup of the
same partitions made by mhictl backup from this modem, or -force is given.
-dry-run only checks the set and prints the plan, without a device.
Arguments are the XML files; rawprogram and patch files are told apart by
their root element. With -device sim the emulated modem's programmer
writes emulated storage (-storage), which lives as long as the command.`,
		Run: flashCmd,
	})
	register(&command{
		Name:  "backup",
		Short: "Save the partitions a rawprogram set would overwrite.",
		Summary: `Force the modem into EDL, load the flash programmer and read every partition
that the rawprogram*.xml files would write (each entry with a filename)
into -o DIR as LUN<n>_<label>.bin, with backup.json recording the modem's
serial number, the storage and, per partition, where it lies and the
SHA-256 of what was read. mhictl flash -backup DIR accepts the backup for
a set whose partitions it covers.`,
		Run: backupCmd,
	})
}

type flashFlags struct {
	df         *deviceFlags
	programmer string
	storage    string
	images     string
	quiet      bool
}

func addFlashFlags(fs *flag.FlagSet) *flashFlags {
	f := &flashFlags{df: addDeviceFlags(fs)}
	fs.StringVar(&f.programmer, "programmer", "", "flash programmer `file` (prog_firehose_*.elf / .mbn); required for hardware, a built-in stand-in with -device sim")
	fs.StringVar(&f.storage, "storage", firehose.MemoryUFS, "the modem's flash: `ufs`, emmc or nand (configure's MemoryName)")
	fs.StringVar(&f.images, "images", "", "`directory` of the images the XML files name (default: the directory of the first rawprogram file)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress lines")
	return f
}

func (f *flashFlags) check() error {
	switch f.storage {
	case firehose.MemoryUFS, firehose.MemoryEMMC, firehose.MemoryNAND:
	default:
		return usagef("-storage: want ufs, emmc or nand, got %q", f.storage)
	}
	return f.df.check()
}

// parseInterspersed parses flags anywhere among the positional arguments
// (mhictl flash rawprogram0.xml -dry-run).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			pos, args = append(pos, args[0]), args[1:]
		}
		if len(args) == 0 {
			return pos, nil
		}
	}
}

// flashSet is the parsed XML files.
type flashSet struct {
	programs []firehose.Program
	patches  []firehose.Patch
	dir      string
}

func loadFlashSet(files []string, images string) (*flashSet, error) {
	s := &flashSet{dir: images}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		if strings.Contains(string(b[:min(len(b), 512)]), "<patches") {
			ps, err := firehose.ParsePatches(b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			s.patches = append(s.patches, ps...)
			continue
		}
		ps, err := firehose.ParseRawprogram(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if s.dir == "" {
			s.dir = filepath.Dir(name)
		}
		s.programs = append(s.programs, ps...)
	}
	if len(s.programs) == 0 {
		return nil, usagef("no rawprogram file among the arguments")
	}
	return s, nil
}

// simStorage makes the emulated modem's flash for -storage (a variable
// for the tests, which keep it to check what was written).
var simStorage = func(kind string) (*sim.Storage, error) {
	switch kind {
	case firehose.MemoryNAND:
		return sim.NewStorage(kind, 16384)
	case firehose.MemoryEMMC:
		return sim.NewStorage(kind, 1<<20)
	}
	return sim.NewStorage(kind, 1<<16, 8192, 8192)
}

// fpSession is a modem with its flash programmer running and a
// configured Firehose client.
type fpSession struct {
	t      *target
	conn   *pairconn.Conn
	c      *firehose.Client
	serial uint32
	cancel context.CancelFunc
}

func (s *fpSession) close() {
	s.conn.Close()
	s.t.close()
	s.cancel()
}

func openFP(ctx context.Context, f *flashFlags, stderr io.Writer) (*fpSession, context.Context, error) {
	prog := []byte("mhistack emulated flash programmer\n")
	if f.programmer != "" {
		b, err := os.ReadFile(f.programmer)
		if err != nil {
			return nil, nil, fmt.Errorf("read the flash programmer: %w", err)
		}
		if len(b) == 0 {
			return nil, nil, fmt.Errorf("%s is empty; pass the modem's prog_firehose image", f.programmer)
		}
		prog = b
	} else if f.df.device != "sim" {
		return nil, nil, usagef("-programmer is required for hardware")
	}
	so := sim.Options{Functions: map[string]sim.Function{}}
	if f.df.device == "sim" {
		if !f.df.simProfile().EDLTrigger {
			return nil, nil, fmt.Errorf("profile %s has no EDL trigger; pick one that has (mhictl list -profiles), e.g. %s", f.df.simProfile().Name, defaultSimProfile)
		}
		st, err := simStorage(f.storage)
		if err != nil {
			return nil, nil, err
		}
		so.Functions["FIREHOSE"] = &sim.Firehose{Storage: st}
	}
	extra := (pairconn.DefaultRxBufs + 32) * mhi.DMAFootprint(pairconn.MaxBufLen, 64)
	t, err := f.df.open(so, mhi.Options{}, mhi.DMAUse{Firmware: len(prog)}, extra)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := f.df.context(ctx)
	fail := func(err error) (*fpSession, context.Context, error) {
		t.close()
		cancel()
		return nil, nil, err
	}
	if err := t.c.EnterEDL(ctx, prog); err != nil {
		return fail(hint(err))
	}
	if t.c.FPSkipped() {
		fmt.Fprintln(stderr, "flash programmer already running (EE FP): not reloaded")
	}
	if _, _, ok := t.c.Profile().ChannelPair("FIREHOSE"); !ok {
		return fail(fmt.Errorf("profile %s has no FIREHOSE channels; the programmer runs but cannot be talked to over MHI", t.c.Profile().Name))
	}
	conn, err := pairconn.Open(ctx, t.c, t.dev.DMA(), "FIREHOSE", pairconn.Options{})
	if err != nil {
		return fail(hint(fmt.Errorf("open FIREHOSE: %w", err)))
	}
	c := firehose.NewClient(conn, firehose.Options{MaxMessage: conn.MaxSend(), OnLog: func(l string) { fmt.Fprintf(stderr, "target: %s\n", l) }})
	c.Drain(ctx, 200*time.Millisecond)
	if _, err := c.Configure(ctx, f.storage); err != nil {
		conn.Close()
		return fail(fmt.Errorf("%w; check -storage matches the modem's flash", err))
	}
	return &fpSession{t: t, conn: conn, c: c, serial: t.c.SerialNumber(), cancel: cancel}, ctx, nil
}

// rateLine prints a step's progress at each quarter with its rate.
type rateLine struct {
	w       io.Writer
	label   string
	start   time.Time
	quarter int64
}

func (r *rateLine) report(label string, done, total int64) {
	if r.w == nil || total <= 0 {
		return
	}
	if label != r.label {
		r.label, r.start, r.quarter = label, time.Now(), 0
	}
	if q := 4 * done / total; q > r.quarter || done == total {
		r.quarter = q
		el := time.Since(r.start).Seconds()
		fmt.Fprintf(r.w, "%s: %d/%d KiB (%d%%) %.1f MB/s\n", label, done>>10, total>>10, 100*done/total, float64(done)/max(el, 1e-6)/1e6)
	}
}

// backupManifest is backup.json.
type backupManifest struct {
	Serial     uint32        `json:"serial"`
	Storage    string        `json:"storage"`
	Partitions []backupEntry `json:"partitions"`
}

type backupEntry struct {
	Label       string `json:"label"`
	LUN         int    `json:"lun"`
	StartSector string `json:"start_sector"`
	Sectors     uint64 `json:"sectors"`
	SectorSize  int    `json:"sector_size"`
	File        string `json:"file"`
	SHA256      string `json:"sha256"`
}

func backupFile(e firehose.Step) string {
	return fmt.Sprintf("LUN%d_%s.bin", e.LUN, strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r < ' ' {
			return '_'
		}
		return r
	}, e.Label))
}

// checkBackup says why the backup in dir does not cover steps, or nil.
func checkBackup(dir string, steps []firehose.Step, storage string, serial uint32) error {
	b, err := os.ReadFile(filepath.Join(dir, "backup.json"))
	if err != nil {
		return err
	}
	var m backupManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("backup.json: %w", err)
	}
	if m.Storage != storage || (serial != 0 && m.Serial != 0 && m.Serial != serial) {
		return fmt.Errorf("the backup is of %s serial %#x, this is %s serial %#x", m.Storage, m.Serial, storage, serial)
	}
	for _, s := range steps {
		if s.Erase {
			continue
		}
		ok := false
		for _, e := range m.Partitions {
			if e.LUN == s.LUN && e.StartSector == s.StartSector && e.SectorSize == s.SectorSize && e.Sectors >= s.Sectors {
				data, err := os.ReadFile(filepath.Join(dir, filepath.Base(e.File)))
				if err != nil {
					return err
				}
				sum := sha256.Sum256(data)
				if hex.EncodeToString(sum[:]) != e.SHA256 {
					return fmt.Errorf("%s: the backup file does not match its SHA-256", e.File)
				}
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("no backup of %s (LUN %d at %s, %d sectors)", s.Label, s.LUN, s.StartSector, s.Sectors)
		}
	}
	return nil
}

type flashOut struct {
	DryRun     bool    `json:"dry_run"`
	Erased     int     `json:"erased"`
	Programmed int     `json:"programmed"`
	Patched    int     `json:"patched"`
	Skipped    int     `json:"patches_skipped"`
	Bytes      int64   `json:"bytes"`
	Bootable   int     `json:"bootable_lun"`
	Seconds    float64 `json:"seconds"`
	MBPerSec   float64 `json:"mb_per_s"`
	Reset      bool    `json:"reset"`
}

func flashCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["flash"]
	fs := newFlagSet(c, "[-device sim|ADDRESS|vfio-user:PATH] -programmer FILE [-storage ufs|emmc|nand] [-backup DIR|-force] [-dry-run] rawprogram*.xml patch*.xml", stderr)
	f := addFlashFlags(fs)
	dry := fs.Bool("dry-run", false, "check the set and print the plan; touch no device")
	backup := fs.String("backup", "", "`directory` of a mhictl backup of the partitions this set writes; required unless -force")
	force := fs.Bool("force", false, "write without a matching backup")
	verify := fs.Bool("verify", false, "read every written partition back and compare")
	reset := fs.Bool("reset", false, "reset the modem (Firehose power reset) after flashing")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	if len(files) == 0 {
		return usagef("name the rawprogram*.xml and patch*.xml files")
	}
	set, err := loadFlashSet(files, f.images)
	if err != nil {
		return err
	}
	steps, err := firehose.Plan(set.programs, set.dir)
	if err != nil {
		return err
	}
	if *dry {
		return printPlan(stdout, f.df.json, steps, set.patches)
	}
	if *backup == "" && !*force {
		return usagef("refusing to write without a backup: run mhictl backup -o DIR with the same rawprogram files and pass -backup DIR, or -force")
	}
	s, ctx, err := openFP(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer s.close()
	if *backup != "" && !*force {
		if err := checkBackup(*backup, steps, f.storage, s.serial); err != nil {
			return fmt.Errorf("refusing to write: %w (make a fresh backup with mhictl backup, or pass -force)", err)
		}
	}
	rl := &rateLine{}
	if !f.quiet {
		rl.w = stderr
	}
	sum, err := firehose.Flash(ctx, s.c, steps, set.patches, firehose.FlashOptions{Verify: *verify, OnProgress: rl.report})
	if err != nil {
		return err
	}
	out := flashOut{Erased: sum.Erased, Programmed: sum.Programmed, Patched: sum.Patched, Skipped: sum.PatchesSkipped,
		Bytes: sum.Bytes, Bootable: sum.Bootable, Seconds: sum.Elapsed.Seconds(), MBPerSec: float64(sum.Bytes) / max(sum.Elapsed.Seconds(), 1e-6) / 1e6}
	if *reset {
		if err := s.c.Power(ctx, "reset", 0); err != nil {
			return err
		}
		out.Reset = true
	}
	if f.df.json {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "flashed: %d partitions programmed (%d KiB, %.1f MB/s over %.2f s), %d erased, %d patches applied, %d host-file patches skipped",
		out.Programmed, out.Bytes>>10, out.MBPerSec, out.Seconds, out.Erased, out.Patched, out.Skipped)
	if out.Bootable >= 0 {
		fmt.Fprintf(stdout, ", LUN %d bootable", out.Bootable)
	}
	if out.Reset {
		fmt.Fprint(stdout, ", modem reset")
	}
	fmt.Fprintln(stdout)
	return nil
}

func printPlan(w io.Writer, asJSON bool, steps []firehose.Step, patches []firehose.Patch) error {
	type row struct {
		Op         string `json:"op"`
		Label      string `json:"label"`
		File       string `json:"file"`
		Start      string `json:"start_sector"`
		LUN        int    `json:"lun"`
		Sectors    uint64 `json:"sectors"`
		SectorSize int    `json:"sector_size"`
	}
	var rows []row
	for _, s := range steps {
		op := "program"
		if s.Erase {
			op = "erase"
		}
		rows = append(rows, row{op, s.Label, s.Filename, s.StartSector, s.LUN, s.Sectors, s.SectorSize})
	}
	disk := 0
	for _, p := range patches {
		if p.Filename == "DISK" {
			disk++
		}
	}
	if asJSON {
		return writeJSON(w, map[string]any{"steps": rows, "disk_patches": disk, "host_file_patches": len(patches) - disk})
	}
	fmt.Fprintf(w, "%-8s %-4s %-22s %8s %6s  %-16s %s\n", "OP", "LUN", "START", "SECTORS", "SIZE", "LABEL", "FILE")
	for _, r := range rows {
		fmt.Fprintf(w, "%-8s %-4d %-22s %8d %6d  %-16s %s\n", r.Op, r.LUN, r.Start, r.Sectors, r.SectorSize, r.Label, r.File)
	}
	fmt.Fprintf(w, "then %d disk patches (%d patches of host files skipped); nothing written (dry run)\n", disk, len(patches)-disk)
	return nil
}

func backupCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["backup"]
	fs := newFlagSet(c, "[-device sim|ADDRESS|vfio-user:PATH] -programmer FILE [-storage ufs|emmc|nand] -o DIR rawprogram*.xml", stderr)
	f := addFlashFlags(fs)
	outDir := fs.String("o", "", "`directory` to write the backup to (created; must not hold a backup.json)")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	if *outDir == "" || len(files) == 0 {
		return usagef("name -o DIR and the rawprogram*.xml files")
	}
	set, err := loadFlashSet(files, f.images)
	if err != nil {
		return err
	}
	steps, err := firehose.Plan(set.programs, set.dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(*outDir, "backup.json")); err == nil {
		return fmt.Errorf("%s already holds a backup; pick another directory", *outDir)
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	s, ctx, err := openFP(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer s.close()
	m := backupManifest{Serial: s.serial, Storage: f.storage}
	rl := &rateLine{}
	if !f.quiet {
		rl.w = stderr
	}
	var total int64
	for _, st := range steps {
		if st.Erase {
			continue
		}
		n := st.Sectors
		if st.NumSectors > n {
			n = st.NumSectors // the whole partition, not only what the image covers
		}
		name := backupFile(st)
		out, err := os.Create(filepath.Join(*outDir, name))
		if err != nil {
			return err
		}
		h := sha256.New()
		size := int64(n) * int64(st.SectorSize)
		err = s.c.Read(ctx, firehose.Sectors{SectorSize: st.SectorSize, LUN: st.LUN, StartSector: st.StartSector, NumSectors: n},
			io.MultiWriter(out, h), func(d int64) { rl.report(st.Label, d, size) })
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("backup %s: %w", st.Label, err)
		}
		total += size
		m.Partitions = append(m.Partitions, backupEntry{Label: st.Label, LUN: st.LUN, StartSector: st.StartSector, Sectors: n,
			SectorSize: st.SectorSize, File: name, SHA256: hex.EncodeToString(h.Sum(nil))})
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(*outDir, "backup.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if f.df.json {
		return writeJSON(stdout, m)
	}
	fmt.Fprintf(stdout, "backed up %d partitions (%d KiB) of %s serial %#x to %s\n", len(m.Partitions), total>>10, f.storage, m.Serial, *outDir)
	return nil
}
