package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/mhistack/mhistack/mhi"
)

// Progress output of fw load and edl: a progress bar when the output is a
// terminal, plain lines otherwise (logs, pipes, CI), so that a captured
// run stays readable.

type progressMode string

const (
	progressAuto  progressMode = "auto"
	progressBar   progressMode = "bar"
	progressPlain progressMode = "plain"
	progressNone  progressMode = "none"
)

func (m *progressMode) String() string { return string(*m) }

func (m *progressMode) Set(v string) error {
	switch progressMode(v) {
	case progressAuto, progressBar, progressPlain, progressNone:
		*m = progressMode(v)
		return nil
	}
	return fmt.Errorf("want auto, bar, plain or none")
}

func addProgressFlag(fs *flag.FlagSet) *progressMode {
	m := progressAuto
	fs.Var(&m, "progress", "progress output: `auto` (a bar on a terminal, lines otherwise), bar, plain or none")
	return &m
}

// progressPrinter turns mhi.Progress reports into output. Reports come
// from the goroutine driving the boot; the mutex keeps it safe anyway.
type progressPrinter struct {
	mu    sync.Mutex
	w     io.Writer
	mode  progressMode
	bar   *progressbar.ProgressBar
	phase mhi.Phase
	step  int // plain mode: last quarter printed
}

func newProgressPrinter(w io.Writer, mode progressMode) *progressPrinter {
	if mode == progressAuto {
		mode = progressPlain
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			mode = progressBar
		}
	}
	return &progressPrinter{w: w, mode: mode}
}

func (p *progressPrinter) report(pr mhi.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == progressNone {
		return
	}
	if pr.Phase == mhi.PhaseReady && pr.Limit > 0 {
		// A long power-up wait (a modem slow to come up READY).
		p.finishBar()
		fmt.Fprintf(p.w, "%s: still waiting for %s: %v of %v\n", pr.Phase, pr.Waiting, pr.Waited.Round(time.Second), pr.Limit)
		return
	}
	if pr.Total == 0 {
		// A step without bytes: EDL trigger, flash programmer up.
		p.finishBar()
		fmt.Fprintf(p.w, "%s: %s\n", pr.Phase, phaseText(pr.Phase))
		return
	}
	if pr.Phase != p.phase {
		p.finishBar()
		p.phase, p.step = pr.Phase, -1
		if p.mode == progressBar {
			p.bar = progressbar.NewOptions64(int64(pr.Total),
				progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetDescription(string(pr.Phase)),
				progressbar.OptionShowBytes(true),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(0),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
			)
		}
	}
	if p.bar != nil {
		_ = p.bar.Set64(int64(pr.Done))
		if pr.Complete {
			_ = p.bar.Finish()
			p.bar = nil
			p.phase = ""
		}
		return
	}
	if pr.Complete {
		fmt.Fprintf(p.w, "%s: %d bytes loaded, device acknowledged\n", pr.Phase, pr.Total)
		p.phase = ""
		return
	}
	// Plain lines at most every quarter: a BHIe image has many segments.
	if q := 4 * pr.Done / pr.Total; q > p.step {
		p.step = q
		fmt.Fprintf(p.w, "%s: %d/%d bytes staged (%d%%)\n", pr.Phase, pr.Done, pr.Total, 100*pr.Done/pr.Total)
	}
}

func (p *progressPrinter) finishBar() {
	if p.bar != nil {
		_ = p.bar.Exit()
		fmt.Fprintln(p.w)
		p.bar = nil
	}
	p.phase = ""
}

func phaseText(ph mhi.Phase) string {
	switch ph {
	case mhi.PhaseEDL:
		return "doorbell 91 cookie and SoC reset sent; waiting for the boot ROM in EDL"
	case mhi.PhaseFP:
		return "flash programmer running (EE FP); FIREHOSE channels 34/35 available"
	}
	return "done"
}

// waitProgress is the boot option of the commands that only power the
// modem up: a modem slow to come up READY is reported on w ("READY:
// still waiting for READY: 6s of 50s") rather than looking hung.
func waitProgress(w io.Writer) mhi.BootOptions {
	return mhi.BootOptions{OnProgress: newProgressPrinter(w, progressPlain).report}
}
