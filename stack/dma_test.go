package stack_test

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pci"
	"github.com/mhistack/mhistack/mhi/pci/vfio"
	"github.com/mhistack/mhistack/stack"
)

// Every profile's pipeline fits in the DMA arena a VFIO device gets for
// it: the emulated modem's IOVA window is exactly that size (Open's
// default for Device "sim"), and the stack (or, without an MBIM pair, the
// link; without a data pair, the engine) comes up and moves data in it.
// With the arena of 16 MiB every device used to get, the 512-element
// profiles (578 RX buffers of 32 KiB) did not fit.
func TestDMAArenaFitsEveryProfile(t *testing.T) {
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	for _, p := range mhi.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _, hasMBIM := p.ChannelPair("MBIM")
			_, _, hasHW := p.ChannelPair("IP_HW0")
			_, _, hasNTB := p.ChannelPair("IP_HW0_MBIM")
			switch {
			case hasMBIM && (hasHW || hasNTB):
				s, err := stack.Open(ctx, stack.Options{Profile: p.Name, APN: "internet"})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				c, err := s.DialContext(ctx, "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				echoOnce(t, c, strings.Repeat("arena ", 2000))
			case hasHW:
				lo := link.Options{Channel: "IP_HW0"}
				n, err := stack.DMASize(p, lo)
				if err != nil {
					t.Fatal(err)
				}
				c := powerUpIn(ctx, t, p, n)
				ep, err := link.New(ctx, c, lo)
				if err != nil {
					t.Fatal(err)
				}
				ep.Close()
			default:
				powerUpIn(ctx, t, p, vfio.ArenaSize(mhi.DMASize(p, mhi.DMAUse{})))
			}
		})
	}
}

// The window the 512-element profiles used to get: the RX pool runs out,
// and the error counts the buffer that failed (it always said "1 of N").
func TestDMAArenaOfSixteenMiBIsTooSmallForSierraEM919x(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{Profile: "sierra-em919x", APN: "internet", Sim: stack.SimOptions{DMAWindow: 16 << 20}})
	if err == nil {
		s.Close()
		t.Fatal("sierra-em919x came up in 16 MiB")
	}
	if !errors.Is(err, pci.ErrNoIOVASpace) {
		t.Fatalf("got %v, want ErrNoIOVASpace", err)
	}
	m := regexp.MustCompile(`RX pool: 32768-byte DMA buffer (\d+) of 578`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("error does not name the RX pool buffer: %v", err)
	}
	if i, _ := strconv.Atoi(m[1]); i < 2 || i > 578 {
		t.Errorf("failed at buffer %d of 578; some buffers fit before the window ran out: %v", i, err)
	}
}

// powerUpIn powers up an emulated p in an IOVA window of size bytes.
func powerUpIn(ctx context.Context, t *testing.T, p *mhi.Profile, size int) *mhi.Controller {
	t.Helper()
	c := mhitest.New(t, mhitest.Options{Profile: p, IOVAWindow: uint64(size), NoPowerUp: true}).Controller
	if err := c.PowerUp(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}
