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
	"github.com/mhistack/mhistack/stack"
)

// Every profile's pipeline fits in the DMA arena a VFIO device gets for
// it, and moves data in it: the emulated modem's IOVA window is exactly
// that size (Open's default for Device "sim"). A profile with a control
// pair comes up through Open and echoes through TCP once per control
// protocol it has (MBIM and QMI size the arena differently: a QMI
// session's QMAP framing aggregates); one with only a software data pair
// (IP_SW0) runs a stack on a link endpoint there, in the arena DMASize
// gives for that channel. With the arena of 16 MiB every device used to
// get, the 512-element profiles (578 RX buffers of 32 KiB) did not fit.
func TestDMAArenaFitsEveryProfile(t *testing.T) {
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	dst := netip.AddrPortFrom(simnet.TestAddr4, port).String()
	msg := strings.Repeat("arena ", 2000)
	for _, p := range mhi.Profiles() {
		has := func(name string) bool { _, _, ok := p.ChannelPair(name); return ok }
		var controls []string
		if has("IP_HW0") || has("IP_HW0_MBIM") {
			for _, ctl := range []string{"mbim", "qmi"} {
				if has(strings.ToUpper(ctl)) {
					controls = append(controls, ctl)
				}
			}
		}
		for _, ctl := range controls {
			t.Run(p.Name+"/"+ctl, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				s, err := stack.Open(ctx, stack.Options{Profile: p.Name, APN: "internet", Control: ctl, FCCUnlock: true})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if got := s.QMI() != nil; got != (ctl == "qmi") {
					t.Fatalf("control %s: session on QMI = %v", ctl, got)
				}
				c, err := s.DialContext(ctx, "tcp4", dst)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				echoOnce(t, c, msg)
			})
		}
		if len(controls) > 0 {
			continue
		}
		t.Run(p.Name+"/IP_SW0", func(t *testing.T) {
			if !has("IP_SW0") {
				t.Fatalf("%s has no data pair this test knows", p.Name)
			}
			t.Parallel()
			n, err := stack.DMASize(p, link.Options{Channel: "IP_SW0"})
			if err != nil {
				t.Fatal(err)
			}
			r := newRigOn(t, stack.Config{}, rigKind{name: "IP_SW0", profile: p.Name, channel: "IP_SW0", iova: uint64(n)})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := r.s.DialContext(ctx, "tcp4", dst)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			echoOnce(t, c, msg)
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
