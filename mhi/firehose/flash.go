package firehose

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrPlan wraps every refusal of a rawprogram/patch set before anything
// is written: a missing or sparse image, an image larger than its
// partition, a filename leaving the image directory.
var ErrPlan = errors.New("firehose: flash plan refused")

// ErrVerify: a programmed range read back different from its image.
var ErrVerify = errors.New("firehose: read-back differs from the image")

// Step is one resolved entry of a flash plan.
type Step struct {
	Program
	Path    string // the image file (empty for erase)
	Sectors uint64 // sectors written: the image's, zero-filled to a sector
	Bytes   int64  // the image's size
}

// Plan resolves programs against the image directory dir: what each
// writes and from which file, without touching the device. Entries with
// an empty filename are skipped (qdl: nothing to write), as are patches
// of host files.
func Plan(programs []Program, dir string) ([]Step, error) {
	var steps []Step
	for _, p := range programs {
		if p.Erase {
			steps = append(steps, Step{Program: p, Sectors: p.NumSectors})
			continue
		}
		if p.Filename == "" {
			continue
		}
		if p.Sparse {
			return nil, fmt.Errorf("%w: %s (%s) is a sparse image; unpack it first (simg2img)", ErrPlan, p.Label, p.Filename)
		}
		if filepath.IsAbs(p.Filename) || strings.Contains(filepath.ToSlash(p.Filename), "..") {
			return nil, fmt.Errorf("%w: %s: filename %q leaves the image directory", ErrPlan, p.Label, p.Filename)
		}
		path := filepath.Join(dir, p.Filename)
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrPlan, p.Label, err)
		}
		ss := int64(p.SectorSize)
		size := st.Size() - int64(p.FileSectorOffset)*ss
		if size <= 0 {
			return nil, fmt.Errorf("%w: %s: %s has nothing after sector %d", ErrPlan, p.Label, p.Filename, p.FileSectorOffset)
		}
		n := uint64((size + ss - 1) / ss)
		if p.NumSectors != 0 && n > p.NumSectors {
			return nil, fmt.Errorf("%w: %s: %s needs %d sectors, the partition has %d", ErrPlan, p.Label, p.Filename, n, p.NumSectors)
		}
		steps = append(steps, Step{Program: p, Path: path, Sectors: n, Bytes: size})
	}
	return steps, nil
}

// FlashOptions configures Flash.
type FlashOptions struct {
	// Verify reads every programmed range back and compares it with
	// its image.
	Verify bool
	// OnProgress is told of each program's progress: its label, bytes
	// done (0 when it starts) and its total.
	OnProgress func(label string, done, total int64)
}

// Summary is what Flash did.
type Summary struct {
	Erased, Programmed, Patched, PatchesSkipped int
	Bytes                                       int64
	Bootable                                    int // LUN made bootable, -1 if none
	Elapsed                                     time.Duration
}

// bootLabels name the partitions whose LUN is made bootable (qdl: xbl,
// xbl_a, sbl1).
var bootLabels = map[string]bool{"xbl": true, "xbl_a": true, "sbl1": true}

// Flash writes a rawprogram/patch set in qdl's order: the erases and
// programs in file order, then the patches of the disk (filename "DISK")
// in file order, then setbootablestoragedrive for the LUN of xbl / xbl_a
// / sbl1 when the set has one. Nothing is sent before Plan accepted
// the whole set.
func Flash(ctx context.Context, c *Client, steps []Step, patches []Patch, o FlashOptions) (Summary, error) {
	start := time.Now()
	sum := Summary{Bootable: -1}
	boot := -1
	for _, s := range steps {
		sec := Sectors{SectorSize: s.SectorSize, LUN: s.LUN, StartSector: s.StartSector, NumSectors: s.Sectors}
		if s.Erase {
			if err := c.Erase(ctx, sec); err != nil {
				return sum, fmt.Errorf("erase %s: %w", s.Label, err)
			}
			sum.Erased++
			continue
		}
		if err := programFile(ctx, c, s, o); err != nil {
			return sum, err
		}
		if o.Verify {
			if err := Verify(ctx, c, s); err != nil {
				return sum, err
			}
		}
		sum.Programmed++
		sum.Bytes += int64(s.Sectors) * int64(s.SectorSize)
		if bootLabels[s.Label] {
			boot = s.LUN
		}
	}
	for _, p := range patches {
		if p.Filename != "DISK" {
			sum.PatchesSkipped++
			continue
		}
		if err := c.Patch(ctx, p); err != nil {
			return sum, fmt.Errorf("patch %q: %w", p.What, err)
		}
		sum.Patched++
	}
	if boot >= 0 {
		if err := c.SetBootableStorageDrive(ctx, boot); err != nil {
			return sum, err
		}
		sum.Bootable = boot
	}
	sum.Elapsed = time.Since(start)
	return sum, nil
}

func programFile(ctx context.Context, c *Client, s Step, o FlashOptions) error {
	f, err := os.Open(s.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := io.NewSectionReader(f, int64(s.FileSectorOffset)*int64(s.SectorSize), s.Bytes)
	total := int64(s.Sectors) * int64(s.SectorSize)
	var progress func(int64)
	if o.OnProgress != nil {
		progress = func(n int64) { o.OnProgress(s.Label, n, total) }
		progress(0) // the step starts: rates count from here
	}
	sec := Sectors{SectorSize: s.SectorSize, LUN: s.LUN, StartSector: s.StartSector, NumSectors: s.Sectors}
	if err := c.Program(ctx, sec, s.Label, r, progress); err != nil {
		return fmt.Errorf("program %s: %w", s.Label, err)
	}
	return nil
}

// Verify reads a programmed step back and compares it with its image,
// zero-filled to the last sector. The error names the first sector that
// differs: after a power loss, where the written part ends.
func Verify(ctx context.Context, c *Client, s Step) error {
	want, err := os.ReadFile(s.Path)
	if err != nil {
		return err
	}
	off := int64(s.FileSectorOffset) * int64(s.SectorSize)
	want = want[off : off+s.Bytes]
	want = append(want, make([]byte, int64(s.Sectors)*int64(s.SectorSize)-s.Bytes)...)
	var got bytes.Buffer
	sec := Sectors{SectorSize: s.SectorSize, LUN: s.LUN, StartSector: s.StartSector, NumSectors: s.Sectors}
	if err := c.Read(ctx, sec, &got, nil); err != nil {
		return fmt.Errorf("verify %s: %w", s.Label, err)
	}
	if bytes.Equal(got.Bytes(), want) {
		return nil
	}
	ss := s.SectorSize
	for i := 0; i < len(want); i += ss {
		if !bytes.Equal(got.Bytes()[i:i+ss], want[i:i+ss]) {
			return fmt.Errorf("%w: %s: sector %d of %d (from the partition's start) differs", ErrVerify, s.Label, i/ss, s.Sectors)
		}
	}
	return fmt.Errorf("%w: %s", ErrVerify, s.Label)
}
