package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/sim"
)

func init() {
	register(&command{
		Name:  "selftest",
		Short: "Loop a pattern through a channel pair; report errors and speed.",
		Summary: `Power the modem up and loop a known pattern through a channel pair: LOOPBACK
where the profile has one; with -device sim, otherwise the IP data channel with
a loopback behind it. Reports throughput and errors; exit 1 if any transfer was
lost or corrupted.`,
		Run: selftest,
	})
}

type selftestOut struct {
	Device     string  `json:"device"`
	Profile    string  `json:"profile"`
	Channel    string  `json:"channel"`
	Transfers  int     `json:"transfers"`
	Size       int     `json:"size"`
	Received   int     `json:"received"`
	Corrupted  int     `json:"corrupted"`
	Lost       int     `json:"lost"`
	Seconds    float64 `json:"seconds"`
	MBPerSec   float64 `json:"mb_per_s"` // payload bytes looped per second, one direction
	TransPerS  float64 `json:"transfers_per_s"`
	FirstError string  `json:"first_error,omitempty"`
}

// selftestBufs is the number of buffers selftest queues in each direction.
const selftestBufs = 16

func selftest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["selftest"]
	fs := newFlagSet(c, "[-device sim|ADDRESS|vfio-user:PATH] [flags]", stderr)
	df := addDeviceFlags(fs)
	count := fs.Int("count", 1000, "number of transfers")
	size := fs.Int("size", 1500, "bytes per transfer (8 to 32768)")
	chName := fs.String("channel", "", "channel pair `name` to loop on (default LOOPBACK, or on sim the IP data pair)")
	if err := parseNoArgs(fs, args, df.check); err != nil {
		return err
	}
	if *count < 1 {
		return usagef("-count must be at least 1")
	}
	if *size < 8 || *size > 32768 {
		return usagef("-size must be 8..32768 bytes")
	}
	name := *chName
	so := sim.Options{}
	if df.device == "sim" {
		p := df.simProfile()
		if name == "" {
			name = pickSelftestPair(p)
		}
		if name == "" {
			return fmt.Errorf("profile %s has no LOOPBACK or IP data channel pair to test", p.Name)
		}
		if _, _, ok := p.ChannelPair(name); !ok {
			return usagef("profile %s has no channel pair %q (mhictl info lists them)", p.Name, name)
		}
		if name != mhi.ChannelLoopback {
			so.Functions = map[string]sim.Function{name: &sim.Loopback{}}
		}
	} else if name == "" {
		name = mhi.ChannelLoopback
	}
	t, err := df.open(so, mhi.Options{Boot: waitProgress(stderr)}, mhi.DMAUse{}, (selftestBufs+selftestBufs)*mhi.DMAFootprint(*size, 64))
	if err != nil {
		return err
	}
	defer t.close()
	if _, _, ok := t.c.Profile().ChannelPair(name); !ok {
		return fmt.Errorf("profile %s has no %s channel pair; on hardware selftest needs a LOOPBACK channel (foxconn-sdx55, cinterion-mv31 have one) or -channel NAME of a pair the firmware loops back", t.c.Profile().Name, name)
	}
	ctx, cancel := df.context(ctx)
	defer cancel()
	if err := t.c.PowerUp(ctx); err != nil {
		return hint(fmt.Errorf("power up: %w", err))
	}
	pio, err := openPair(ctx, t.c, t.dev.DMA(), name, *size, selftestBufs, selftestBufs)
	if err != nil {
		return hint(err)
	}
	defer pio.close()
	out := runPattern(ctx, pio, *count, *size)
	out.Device, out.Profile, out.Channel = df.device, t.c.Profile().Name, name
	if df.json {
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "selftest %s on %s (%s): %d/%d transfers of %d bytes back, %d corrupted, %d lost\n",
			name, out.Device, out.Profile, out.Received, out.Transfers, out.Size, out.Corrupted, out.Lost)
		fmt.Fprintf(stdout, "throughput %.1f MB/s, %.0f transfers/s over %.3fs\n", out.MBPerSec, out.TransPerS, out.Seconds)
	}
	if out.Corrupted > 0 || out.Lost > 0 {
		return fmt.Errorf("selftest failed: %d corrupted, %d lost (first: %s); run mhictl info and check dmesg/the modem's logs", out.Corrupted, out.Lost, out.FirstError)
	}
	return nil
}

// pickSelftestPair is the pair selftest loops on the emulated modem: its
// LOOPBACK, else the data pair a session would use (mhi.Profile.DataPath),
// else "".
func pickSelftestPair(p *mhi.Profile) string {
	if _, _, ok := p.ChannelPair(mhi.ChannelLoopback); ok {
		return mhi.ChannelLoopback
	}
	if dp, err := p.DataPath("", ""); err == nil {
		return dp.Channel
	}
	return ""
}

// pattern fills b with transfer i's known bytes: the sequence number, then
// bytes that differ per offset and per transfer.
func pattern(b []byte, i int) {
	binary.BigEndian.PutUint32(b, uint32(i))
	for j := 4; j < len(b); j++ {
		b[j] = byte(i*131 + j*7 + 0x5A)
	}
}

// runPattern sends count transfers from one goroutine and checks them as
// they come back, in order. It returns when every transfer came back or
// one did not within the wait.
func runPattern(ctx context.Context, pio *pairIO, count, size int) selftestOut {
	out := selftestOut{Transfers: count, Size: size}
	sendCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	sendErr := make(chan error, 1)
	// Credits bound the transfers on their way back to what the receive
	// queue holds: UL completions return TX buffers long before the DL
	// copies are read, so the sender could otherwise outrun the reader.
	credits := make(chan struct{}, cap(pio.rx)/2)
	start := time.Now()
	go func() {
		defer wg.Done()
		buf := make([]byte, size)
		for i := range count {
			select {
			case credits <- struct{}{}:
			case <-sendCtx.Done():
				return
			}
			pattern(buf, i)
			if err := pio.send(sendCtx, buf); err != nil {
				sendErr <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
	}()
	want := make([]byte, size)
	for i := range count {
		got, err := pio.recv(ctx, 5*time.Second)
		if err != nil {
			select {
			case serr := <-sendErr:
				err = serr
			default:
			}
			out.Lost = count - i
			out.FirstError = fmt.Sprintf("transfer %d: %v", i, err)
			break
		}
		<-credits
		out.Received++
		pattern(want, i)
		if !bytes.Equal(got, want) {
			out.Corrupted++
			if out.FirstError == "" {
				out.FirstError = fmt.Sprintf("transfer %d: %d bytes differ from the pattern", i, len(got))
			}
		}
	}
	elapsed := time.Since(start)
	stop()
	wg.Wait()
	out.Seconds = elapsed.Seconds()
	out.MBPerSec = float64(out.Received*size) / elapsed.Seconds() / 1e6
	out.TransPerS = float64(out.Received) / elapsed.Seconds()
	return out
}

// pairIO moves single-buffer transfers over a UL/DL channel pair whose
// event ring the controller services (completions arrive through
// OnComplete on its interrupt goroutine). DL buffers are re-queued from
// the completion callback.
type pairIO struct {
	ul, dl *mhi.Channel
	dma    pci.DMA
	bufLen int
	txFree chan *pci.Buffer
	rx     chan []byte

	dropped atomic.Uint64 // DL transfers nobody was waiting for

	mu      sync.Mutex
	partial []byte
	bufs    []*pci.Buffer
}

func openPair(ctx context.Context, c *mhi.Controller, dma pci.DMA, name string, bufLen, rxBufs, txBufs int) (*pairIO, error) {
	p := &pairIO{dma: dma, bufLen: bufLen, txFree: make(chan *pci.Buffer, txBufs), rx: make(chan []byte, 4*rxBufs)}
	ul, dl, err := c.ChannelPair(name,
		mhi.ChannelOptions{OnComplete: func(c mhi.Completion) { p.txFree <- c.Buf }, Release: func(b *pci.Buffer) { p.txFree <- b }},
		mhi.ChannelOptions{OnComplete: p.onRX})
	if err != nil {
		return nil, err
	}
	p.ul, p.dl = ul, dl
	// A ring of N elements holds N-1 TREs: a DL ring smaller than the
	// receive buffers (DIAG has 16 elements) would refuse the last.
	rxBufs = max(1, min(rxBufs, dl.Elements()-1))
	for i := 0; i < rxBufs+txBufs; i++ {
		b, err := dma.Alloc(bufLen, 64)
		if err != nil {
			p.freeBufs()
			return nil, err
		}
		p.bufs = append(p.bufs, b)
		if i >= rxBufs {
			p.txFree <- b
		}
	}
	if err := ul.Start(ctx); err != nil {
		p.freeBufs()
		return nil, fmt.Errorf("start %s UL: %w", name, err)
	}
	if err := dl.Start(ctx); err != nil {
		_ = ul.Reset(ctx)
		p.freeBufs()
		return nil, fmt.Errorf("start %s DL: %w", name, err)
	}
	for _, b := range p.bufs[:rxBufs] {
		if err := dl.Queue(b, bufLen, mhi.EOT); err != nil {
			p.close()
			return nil, err
		}
	}
	dl.Ring()
	return p, nil
}

// onRX runs on the controller's interrupt goroutine: copy the data out,
// give the buffer straight back to the device.
func (p *pairIO) onRX(c mhi.Completion) {
	p.mu.Lock()
	p.partial = append(p.partial, c.Buf.Mem[:c.Len]...)
	var done []byte
	if c.Code != mhi.CodeOverflow {
		done, p.partial = p.partial, nil
	}
	p.mu.Unlock()
	if done != nil {
		select {
		case p.rx <- done:
		default:
			// Only when the reader gave up (senders hold credits);
			// the transfer is then counted as lost.
			p.dropped.Add(1)
		}
	}
	if p.dl.Queue(c.Buf, p.bufLen, mhi.EOT) == nil {
		p.dl.Ring()
	}
}

// send queues one transfer of at most bufLen bytes.
func (p *pairIO) send(ctx context.Context, data []byte) error {
	if len(data) > p.bufLen {
		return fmt.Errorf("transfer of %d bytes exceeds the %d-byte buffer", len(data), p.bufLen)
	}
	var b *pci.Buffer
	select {
	case b = <-p.txFree:
	case <-ctx.Done():
		return ctx.Err()
	}
	n := copy(b.Mem, data)
	for {
		err := p.ul.Queue(b, n, mhi.EOT)
		if err == nil {
			break
		}
		if !errors.Is(err, mhi.ErrRingFull) {
			p.txFree <- b
			return err
		}
		p.ul.Ring()
		select {
		case <-time.After(100 * time.Microsecond):
		case <-ctx.Done():
			p.txFree <- b
			return ctx.Err()
		}
	}
	p.ul.Ring()
	return nil
}

// recv waits up to d for the next DL transfer.
func (p *pairIO) recv(ctx context.Context, d time.Duration) ([]byte, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case b := <-p.rx:
		return b, nil
	case <-t.C:
		return nil, fmt.Errorf("nothing received within %v", d)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close resets both channels (the controller hands queued buffers back)
// and frees the buffers.
func (p *pairIO) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.ul.Reset(ctx)
	_ = p.dl.Reset(ctx)
	p.freeBufs()
}

func (p *pairIO) freeBufs() {
	for _, b := range p.bufs {
		_ = p.dma.Free(b)
	}
	p.bufs = nil
}
