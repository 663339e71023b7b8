package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/reliability"
)

func init() {
	register(&command{
		Name:  "sim quirks",
		Short: "Run every modem profile, its quirks on, through a modem's life.",
		Summary: `Run the quirk matrix: each modem profile on an emulated modem of its own,
in this process, with the documented behaviours (quirks) of its model on
(slow-ready, no-inband-wake, no-m3 ...; docs/QUIRKS.md), through the steps
of a modem's life:

  power-up    the device and MHI to mission mode, the MBIM or QMI client
  session     the data session (MBIM or QMI, as the profile's data path
              says; a link on IP_SW0 for a profile without a control pair)
  data        a TCP echo through the stack and the carrier network to a
              server on this host's loopback, both ways
  sys-err     an injected firmware crash (SYS_ERR), until the host
              recovered and the data session is back
  m3-m0       Suspend to M3, Resume to M0 (a model without M3 must have
              Suspend refused with errors.ErrUnsupported)
  data-again  the echo again

and print a table: profile, the quirks the modem played, the session, each
step "ok" or "FAIL" with its time, and the row's verdict; then the errors
of each failed row. The modem is strict: a host protocol violation fails
its row. slow-ready is scaled down to -ready-delay (real modems take
seconds). The same table is what "go test ./reliability -run Matrix -v"
logs. Exit status 1 if any row failed.`,
		Run: simQuirks,
	})
}

func simQuirks(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["sim quirks"]
	fs := newFlagSet(c, "[flags]", stderr)
	profiles := fs.String("profile", "", "comma-separated modem `profiles` to run (default: every profile of mhi's table; mhictl list -profiles names them)")
	readyDelay := fs.Duration("ready-delay", reliability.DefaultMatrixReadyDelay, "how long a modem with the slow-ready quirk takes to come up READY after power-on and every reset")
	parallel := fs.Int("parallel", 4, "how many profiles run at once")
	size := fs.Int("bytes", 64<<10, "bytes each data step sends and expects echoed")
	stepTimeout := fs.Duration("step-timeout", 30*time.Second, "bound of each step")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *readyDelay <= 0 || *parallel <= 0 || *size <= 0 || *stepTimeout <= 0 {
		return usagef("-ready-delay, -parallel, -bytes and -step-timeout must be positive")
	}
	o := reliability.QuirkMatrixOptions{ReadyDelay: *readyDelay, Parallel: *parallel, Bytes: *size, StepTimeout: *stepTimeout}
	for _, name := range strings.Split(*profiles, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		p, ok := mhi.Lookup(name)
		if !ok {
			return usagef("unknown profile %q (mhictl list -profiles names them)", name)
		}
		o.Profiles = append(o.Profiles, p)
	}
	rows, err := reliability.RunQuirkMatrix(ctx, o)
	if err != nil {
		return err
	}
	if err := reliability.WriteQuirkMatrix(stdout, rows, o); err != nil {
		return err
	}
	failed := 0
	for i := range rows {
		if rows[i].Err() != nil {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d profiles failed the quirk matrix", failed, len(rows))
	}
	return nil
}
