package stack_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/nmea"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// Modem.GNSS streams the NMEA port's sentences beside the data session:
// a fix (GGA) at the emulated receiver's default position comes, data
// still flows, a closed stream and a closed modem fail Next with
// ErrClosed, and a modem without the port fails with ErrNoGNSSPort.
func TestModemGNSSStreamsSentencesBesideTheDataSession(t *testing.T) {
	nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet"})
	s := openOn(t, "quectel-rm5xx", nw, simnet.DefaultCarrier())
	m := s.Modem()
	ctx := ctxT(t, 30*time.Second)
	g, err := m.GNSS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		sen, line, err := g.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if sen.Type != "GGA" {
			continue
		}
		lat, err := nmea.ParseLatLon(sen.Fields[1], sen.Fields[2])
		if err != nil || lat < 48.1172 || lat > 48.1174 {
			t.Fatalf("GGA %q: latitude %v, %v; want the default 48.1173", line, lat, err)
		}
		break
	}
	if st := g.Stats(); st.Sentences == 0 || st.BadChecksum != 0 || st.Malformed != 0 {
		t.Errorf("stats %+v", st)
	}
	bulkEcho(t, s, 4<<10)
	if err := g.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, _, err := g.Next(ctx); !errors.Is(err, stack.ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	g2, err := m.GNSS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, _, err := g2.Next(ctx); err != nil {
				done <- err
				return
			}
		}
	}()
	s.Close()
	if err := <-done; !errors.Is(err, stack.ErrClosed) {
		t.Errorf("Next on a closed modem: %v, want ErrClosed", err)
	}
	if _, err := m.GNSS(ctx); !errors.Is(err, stack.ErrClosed) {
		t.Errorf("GNSS on a closed modem: %v, want ErrClosed", err)
	}

	plain := openOn(t, "", simnet.NewNetwork(simnet.NetworkConfig{APN: "internet"}), simnet.DefaultCarrier())
	if g, err := plain.Modem().GNSS(ctx); !errors.Is(err, stack.ErrNoGNSSPort) || g != nil {
		t.Errorf("GNSS on %s: %v, %v; want nil, ErrNoGNSSPort", plain.Controller().Profile().Name, g, err)
	}
}
