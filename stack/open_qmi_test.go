package stack_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi/sim"
	"github.com/mhistack/mhistack/stack"
)

// shaThroughTCP sends n random bytes to the host's echo server through s
// and checks the SHA-256 of what comes back.
func shaThroughTCP(t *testing.T, ctx context.Context, s *stack.Stack, n int) {
	t.Helper()
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	c, err := s.DialContext(ctx, "tcp4", netip.AddrPortFrom(simnet.TestAddr4, port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	want := sha256.Sum256(data)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, bytes.NewReader(data))
		werr <- err
	}()
	h := sha256.New()
	if _, err := io.CopyN(h, c, int64(n)); err != nil {
		t.Fatalf("echo read: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatalf("SHA-256 of the echo %x, want %x", got, want)
	}
}

// TestOpenQMI: a QMI-controlled session end to end — the Telit FN980 v1
// (QMI, IPCR and IP_HW0 only, so QMI is picked) and the generic SDX55
// with QMI forced over its MBIM pair — with QMAP v5 and DL aggregation
// as WDA agreed, and a QMAP v1-only modem. 4 MiB through TCP, checked
// with SHA-256. The strict modem fails the test on any host violation,
// and its carrier network parses UL frames in the QMAP version the
// modem agreed to (a MAPv1 frame on a MAPv5 pair, or the reverse, is a
// violation), so the host's data path followed the WDA answer.
func TestOpenQMI(t *testing.T) {
	for _, tc := range []struct {
		name, profile, control string
		maxAgg                 qmi.Aggregation
	}{
		{"telit-fn980-hwv1 auto", "telit-fn980-hwv1", "", 0},
		{"qcom-sdx55m forced", "qcom-sdx55m", "qmi", 0},
		{"qcom-sdx55m forced, MAPv1-only modem", "qcom-sdx55m", "qmi", qmi.AggregationQMAP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s, err := stack.Open(ctx, stack.Options{APN: "internet", Profile: tc.profile, Control: tc.control, Sim: stack.SimOptions{
				Modem:         sim.Options{Strict: true, OnViolation: func(err error) { t.Error("protocol violation:", err) }},
				NetworkConfig: simnet.NetworkConfig{APN: "internet"},
				QMI:           simnet.QMIConfig{MaxAggregation: tc.maxAgg},
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.MBIM() != nil || s.QMI() == nil {
				t.Errorf("control clients: MBIM %v, QMI %v; want only QMI", s.MBIM(), s.QMI())
			}
			car := simnet.DefaultCarrier()
			if addrs := s.Addresses(); !slices.Contains(addrs, car.IPv4) || !slices.Contains(addrs, car.IPv6) {
				t.Fatalf("addresses %v, want %v and %v", addrs, car.IPv4, car.IPv6)
			}
			if dns := s.DNSServers(); len(dns) != 3 || s.MTU() != car.MTU {
				t.Fatalf("DNS %v, MTU %d", dns, s.MTU())
			}
			shaThroughTCP(t, ctx, s, 4<<20)
			ls := s.Stats().Link
			if ls == nil || ls.RXFrames == 0 || ls.RXPackets <= ls.RXFrames {
				t.Errorf("link stats %+v: want DL aggregation (more packets than frames)", ls)
			}
			t.Logf("DL %d packets in %d frames, UL %d packets in %d frames", ls.RXPackets, ls.RXFrames, ls.TXPackets, ls.TXFrames)
		})
	}
}

// TestOpenControlSelection: a forced control the profile lacks, or an
// unknown one, fails Open with a message that says so.
func TestOpenControlSelection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct{ profile, control, want string }{
		{"telit-fn980-hwv1", "mbim", `no channel pair "MBIM"`},
		{"quectel-rm5xx", "qmi", `no channel pair "QMI"`},
		{"qcom-sdx55m", "at", "unknown control protocol"},
	} {
		_, err := stack.Open(ctx, stack.Options{Profile: tc.profile, Control: tc.control})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s with control %q: %v, want an error containing %q", tc.profile, tc.control, err, tc.want)
		}
	}
}
