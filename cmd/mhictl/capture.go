package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"time"
)

func init() {
	register(&command{
		Name:  "capture",
		Short: "Bring the modem up and write a pcap of its data channel.",
		Summary: `Bring the modem up (as mhictl status does) and write a pcap of the data
channel (raw IP, LINKTYPE_RAW, both directions as the stack sees them) to
-o FILE until -duration has passed, -count packets were written, or
SIGINT/SIGTERM. -ping ADDR sends -ping-count echo requests to ADDR while
capturing (on -device sim, 198.18.0.1 is the carrier's test address), so
that the capture has something in it. -timeout bounds the bring-up only.`,
		Run: capture,
	})
}

type captureOut struct {
	File      string  `json:"file"`
	Packets   uint64  `json:"packets"`
	Bytes     uint64  `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	Pings     int     `json:"pings,omitempty"`
	PingsOK   int     `json:"pings_ok,omitempty"`
	StoppedBy string  `json:"stopped_by"`
}

func capture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["capture"]
	fs := newFlagSet(c, "-o FILE [-duration D] [-count N] [-ping ADDR] [-device sim|ADDRESS|vfio-user:PATH] [flags]", stderr)
	sf := addSessionFlags(fs)
	file := fs.String("o", "", "write the pcap to `FILE` (required; replaced if it exists)")
	duration := fs.Duration("duration", 0, "stop after this long (0: no limit)")
	count := fs.Uint64("count", 0, "stop after this many packets (0: no limit)")
	snapLen := fs.Uint("snaplen", 65535, "cut each packet to this many bytes")
	ping := fs.String("ping", "", "send echo requests to this `ADDR` while capturing (e.g. 198.18.0.1 on -device sim)")
	pingCount := fs.Int("ping-count", 3, "number of echo requests -ping sends")
	pingInterval := fs.Duration("ping-interval", 200*time.Millisecond, "time between -ping echo requests")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return usagef("-o FILE is required")
	}
	if *duration < 0 {
		return usagef("-duration must not be negative")
	}
	if *snapLen == 0 || *snapLen > 1<<18 {
		return usagef("-snaplen must be 1..262144")
	}
	var dst netip.Addr
	if *ping != "" {
		var err error
		if dst, err = netip.ParseAddr(*ping); err != nil {
			return usagef("-ping: want an IP address, got %q", *ping)
		}
		if *pingCount < 1 {
			return usagef("-ping-count must be at least 1")
		}
		if *pingInterval <= 0 {
			return usagef("-ping-interval must be positive")
		}
	}
	if err := sf.check(); err != nil {
		return err
	}

	openCtx, cancelOpen := sf.context(ctx)
	s, err := sf.openStack(openCtx)
	cancelOpen()
	if err != nil {
		return err
	}
	defer s.Close()

	f, err := os.Create(*file)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	cw := &pcapCounter{w: bw, limit: *count, full: make(chan struct{})}
	start := time.Now()
	stop, err := s.CapturePcap(cw, uint32(*snapLen))
	if err != nil {
		f.Close()
		return err
	}

	var timer <-chan time.Time
	if *duration > 0 {
		t := time.NewTimer(*duration)
		defer t.Stop()
		timer = t.C
	}
	pingCtx, cancelPing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var pingsOK int
	if dst.IsValid() {
		wg.Go(func() {
			for i := range *pingCount {
				if i > 0 {
					select {
					case <-pingCtx.Done():
						return
					case <-time.After(*pingInterval):
					}
				}
				pctx, cancel := context.WithTimeout(pingCtx, 2*time.Second)
				rtt, err := s.Ping(pctx, dst)
				cancel()
				if pingCtx.Err() != nil {
					return
				}
				if err != nil {
					fmt.Fprintf(stderr, "mhictl: ping %s: %v\n", dst, err)
					continue
				}
				pingsOK++
				if !sf.json {
					fmt.Fprintf(stderr, "ping %s: %v\n", dst, rtt.Round(time.Microsecond))
				}
			}
		})
	}

	var why string
	select {
	case <-ctx.Done():
		why = "signal"
	case <-timer:
		why = "duration"
	case <-cw.full:
		why = "count"
	}
	cancelPing()
	wg.Wait()
	werr := stop()
	if errors.Is(werr, errCountReached) {
		werr = nil
	}
	elapsed := time.Since(start)
	if err := errors.Join(werr, bw.Flush(), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", *file, err)
	}
	out := captureOut{File: *file, Packets: cw.packets, Bytes: cw.bytes, Seconds: elapsed.Seconds(), StoppedBy: why}
	if dst.IsValid() {
		out.Pings, out.PingsOK = *pingCount, pingsOK
	}
	if sf.json {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "%d packets (%d bytes) written to %s in %v (stopped by %s)\n",
		out.Packets, out.Bytes, out.File, elapsed.Round(time.Millisecond), why)
	return nil
}

// errCountReached is what pcapCounter returns once -count packets are
// written: the capture stops writing at a record boundary.
var errCountReached = errors.New("packet count reached")

// pcapCounter follows the pcap stream the stack writes (file header,
// then a 16-byte record header and caplen bytes per packet) to count the
// packets, and refuses the record after the limit so the file holds
// exactly limit packets. The stack serializes its writes.
type pcapCounter struct {
	w              io.Writer
	limit          uint64 // 0: none
	full           chan struct{}
	packets, bytes uint64

	hdrLeft  int // bytes of the file header still to come
	started  bool
	rec      [16]byte
	recFill  int
	bodyLeft uint32
}

func (c *pcapCounter) Write(b []byte) (int, error) {
	if !c.started {
		c.started, c.hdrLeft = true, 24
	}
	n := len(b)
	p := b
	for len(p) > 0 {
		switch {
		case c.hdrLeft > 0:
			k := min(c.hdrLeft, len(p))
			c.hdrLeft -= k
			p = p[k:]
		case c.bodyLeft > 0:
			k := min(int(c.bodyLeft), len(p))
			c.bodyLeft -= uint32(k)
			p = p[k:]
		default:
			if c.recFill == 0 && c.limit > 0 && c.packets >= c.limit {
				return 0, errCountReached
			}
			k := copy(c.rec[c.recFill:], p)
			c.recFill += k
			p = p[k:]
			if c.recFill == len(c.rec) {
				c.recFill = 0
				c.bodyLeft = binary.LittleEndian.Uint32(c.rec[8:])
				c.packets++
				c.bytes += uint64(binary.LittleEndian.Uint32(c.rec[12:]))
				if c.limit > 0 && c.packets == c.limit {
					close(c.full)
				}
			}
		}
	}
	return c.w.Write(b[:n])
}
