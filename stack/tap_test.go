package stack_test

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// TestCapturePcapSeesWhatTheStackSends: a capture holds the pings of
// both families, both ways, and TCP's GSO batches whole (records longer
// than the MTU); a second capture is refused without a byte written;
// after stop nothing more is written.
func TestCapturePcapSeesWhatTheStackSends(t *testing.T) {
	r := newRig(t, stack.Config{})
	var b bytes.Buffer
	stop, err := r.s.CapturePcap(&b, 0)
	if err != nil {
		t.Fatal(err)
	}
	var other bytes.Buffer
	if _, err := r.s.CapturePcap(&other, 0); !errors.Is(err, stack.ErrCaptureRunning) || other.Len() != 0 {
		t.Errorf("second CapturePcap: %v with %d bytes written, want ErrCaptureRunning and none", err, other.Len())
	}
	for _, dst := range []netip.Addr{simnet.TestAddr4, simnet.TestAddr6} {
		if _, err := r.s.Ping(ctxT(t, 5*time.Second), dst); err != nil {
			t.Fatalf("ping %v: %v", dst, err)
		}
	}
	port := hostEcho(t, "tcp4", "127.0.0.1:0")
	c, err := r.s.DialContext(ctxT(t, 10*time.Second), "tcp", netip.AddrPortFrom(simnet.TestAddr4, port).String())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 16<<10)
	go c.Write(data)
	if _, err := io.ReadFull(c, make([]byte, len(data))); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	n := b.Len()
	if _, err := r.s.Ping(ctxT(t, 5*time.Second), simnet.TestAddr4); err != nil {
		t.Fatal(err)
	}
	if b.Len() != n {
		t.Errorf("%d bytes written after stop", b.Len()-n)
	}
	if err := stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}

	pr, err := pcapgo.NewReader(&b)
	if err != nil {
		t.Fatal(err)
	}
	if pr.LinkType() != layers.LinkTypeRaw || pr.Snaplen() != 65535 {
		t.Errorf("link type %v, snaplen %d; want RAW and 65535", pr.LinkType(), pr.Snaplen())
	}
	var echo4, echo6, big int
	for {
		d, ci, err := pr.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ci.Length > int(r.s.MTU()) {
			big++
		}
		p := gopacket.NewPacket(d, layers.LinkTypeRaw, gopacket.DecodeOptions{NoCopy: true, Lazy: true})
		if i, ok := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok {
			if ty := i.TypeCode.Type(); ty == layers.ICMPv4TypeEchoRequest || ty == layers.ICMPv4TypeEchoReply {
				echo4++
			}
		}
		if i, ok := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6); ok {
			if ty := i.TypeCode.Type(); ty == layers.ICMPv6TypeEchoRequest || ty == layers.ICMPv6TypeEchoReply {
				echo6++
			}
		}
	}
	if echo4 != 2 || echo6 != 2 || big == 0 {
		t.Errorf("%d ICMPv4 and %d ICMPv6 echo packets (want 2 each), %d records longer than the MTU (want GSO batches)", echo4, echo6, big)
	}
}
