package main

import (
	"errors"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mhistack/mhistack/link/radio"
)

func TestQuantileIsTheNearestRank(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, c := range []struct{ q, want float64 }{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := quantile(v, c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if v[0] != 5 {
		t.Error("quantile sorted its argument")
	}
}

// inNS runs f on a thread in the named network namespace; the thread
// stays tainted and exits with its goroutine.
func inNS(t *testing.T, ns string, f func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err == nil {
			f()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("enter %s: %v", ns, err)
	}
}

// A datagram from the device's namespace reaches the network's through
// the model's uplink, one back takes the downlink, and close removes both
// namespaces.
func TestTunPairCarriesEachDirectionThroughTheModelAndCloseRemovesTheNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("MHISTACK_REQUIRE_ROOT") == "1" {
			t.Fatal("not root")
		}
		t.Skip("needs root for network namespaces and TUN devices: run as root (MHISTACK_REQUIRE_ROOT=1 makes this fail instead)")
	}
	cfg, err := radio.Preset("lte")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Up.Loss, cfg.Down.Loss, cfg.RRC = 0, 0, radio.RRC{}
	p, err := newTunPair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := p.ns
	defer func() {
		if p != nil {
			p.close()
		}
	}()
	var netConn, devConn net.PacketConn
	inNS(t, ns[netSide], func() { netConn, err = net.ListenPacket("udp4", p.addr[netSide]+":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer netConn.Close()
	inNS(t, ns[devSide], func() { devConn, err = net.ListenPacket("udp4", p.addr[devSide]+":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer devConn.Close()
	buf := make([]byte, 100)
	for _, c := range []struct {
		from, to net.PacketConn
		dir      radio.Dir
	}{{devConn, netConn, radio.Up}, {netConn, devConn, radio.Down}} {
		if _, err := c.from.WriteTo([]byte("hello"), c.to.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		c.to.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := c.to.ReadFrom(buf)
		if err != nil || string(buf[:n]) != "hello" {
			t.Fatalf("direction %v: read %q, %v", c.dir, buf[:n], err)
		}
		if st := p.link.Stats(c.dir); st.Delivered == 0 {
			t.Errorf("direction %v: the model delivered nothing: %+v", c.dir, st)
		}
	}
	p.close()
	p = nil
	for _, n := range ns {
		if _, err := os.Stat("/run/netns/" + n); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s still there after close: %v", n, err)
		}
	}
}

func TestRadioTargetsSayWhatIsMissedAndByHowMuch(t *testing.T) {
	lossy, err := radio.Preset("lte")
	if err != nil {
		t.Fatal(err)
	}
	clean, err := radio.Preset("nr-mmwave-far-scaled")
	if err != nil {
		t.Fatal(err)
	}
	if radioLossFree(lossy) || !radioLossFree(clean) {
		t.Fatalf("radioLossFree: lte %v, nr-mmwave-far-scaled %v", radioLossFree(lossy), radioLossFree(clean))
	}
	down, up := float64(clean.Down.Rate)/1e6, float64(clean.Up.Rate)/1e6
	res := []series{
		{{"mh_down": 29, "mh_up": 4.8, "mhrack_up": 5.4, "cubic_down": 29.05, "cubic_up": 6, "mh_ping99": 90, "cubic_ping99": 40}},
		{{"mh_down": 0.95 * down, "mh_up": 0.5 * up, "gv_down": 0.8 * down, "gv_up": 0.9 * up,
			"cubic_down": down, "cubic_up": up, "mh_ping99": 100, "cubic_ping99": 100}},
	}
	notes := radioTargets([]string{"lte", "nr-mmwave-far-scaled"}, []radio.Config{lossy, clean}, res, true)
	want := []string{
		"lte (lossy or a trace: at least Linux cubic's goodput; ping p99 within 2 × Linux cubic's): " +
			"mhistack down 1.00 × Linux cubic: met; mhistack up 0.80 × Linux cubic: **missed** by 20 % (RACK on: 0.90 ×); " +
			"ping p99 during the upload 2.25 × Linux cubic's: **missed** by 0.25×.",
		"nr-mmwave-far-scaled (loss-free: at least 0.9 × the bottleneck; ping p99 within 2 × Linux cubic's): " +
			"mhistack down 95 % of the bottleneck: met; plain gVisor down 80 %: **missed** by 10 points; " +
			"mhistack up 50 % of the bottleneck: **missed** by 40 points; plain gVisor up 90 %: met; " +
			"ping p99 during the upload 1.00 × Linux cubic's: met.",
	}
	if len(notes) != len(want) {
		t.Fatalf("notes = %q", notes)
	}
	for i := range want {
		if notes[i] != want[i] {
			t.Errorf("note %d\n got %s\nwant %s", i, notes[i], want[i])
		}
	}
	// Without root there is no Linux reference: only the bottleneck
	// targets are judged.
	if n := radioTargets([]string{"lte"}, []radio.Config{lossy}, res[:1], false); len(n) != 1 || strings.Contains(n[0], "cubic:") {
		t.Errorf("without root: %q", n)
	}
}
