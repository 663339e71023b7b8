package stack_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/at"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// Modem.AT sends a command on the modem's AT port beside the data
// session and returns its answer: concurrent calls get their own
// answers, ERROR comes as an *at.Error, a line that is not a command is
// refused, a modem without an AT port fails with ErrNoATPort, and a
// closed one with ErrClosed.
func TestModemATAnswersBesideTheDataSession(t *testing.T) {
	nw := simnet.NewNetwork(simnet.NetworkConfig{APN: "internet"})
	s := openOn(t, "quectel-rm5xx", nw, simnet.DefaultCarrier())
	m := s.Modem()
	ctx := ctxT(t, 30*time.Second)
	nw.SetSignal(17)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			cmd, want := "AT+CSQ", "+CSQ: 17,0"
			if i%2 == 1 {
				cmd, want = "AT+COPS?", `+COPS: 0,0,"mhistack",7`
			}
			resp, err := m.AT(ctx, cmd)
			if err != nil || resp.Final != "OK" || len(resp.Lines) != 1 || resp.Lines[0] != want {
				t.Errorf("%s: %+v, %v; want %q and OK", cmd, resp, err, want)
			}
		})
	}
	wg.Wait()
	bulkEcho(t, s, 4<<10)
	if resp, err := m.AT(ctx, "AT+NOSUCH"); !errors.Is(err, at.ErrCommand) || resp.Final != "ERROR" {
		t.Errorf("AT+NOSUCH: %+v, %v; want ERROR", resp, err)
	}
	if _, err := m.AT(ctx, "hello"); err == nil {
		t.Error("a line that is not an AT command was sent")
	}
	if resp, err := m.AT(ctx, "AT"); err != nil || resp.Final != "OK" {
		t.Errorf("AT after the refusals: %+v, %v", resp, err)
	}
	s.Close()
	if _, err := m.AT(ctx, "AT"); !errors.Is(err, stack.ErrClosed) {
		t.Errorf("AT on a closed modem: %v, want ErrClosed", err)
	}

	plain := openOn(t, "", simnet.NewNetwork(simnet.NetworkConfig{APN: "internet"}), simnet.DefaultCarrier())
	if _, err := plain.Modem().AT(ctx, "AT"); !errors.Is(err, stack.ErrNoATPort) {
		t.Errorf("AT on %s: %v, want ErrNoATPort", plain.Controller().Profile().Name, err)
	}
}
