package qmi_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/sim"
)

// fn980Rig is an MHI controller powered up on the strict emulated Telit
// FN980 v1 (QMI is its only control pair) running fn; closed with the
// test.
type fn980Rig struct {
	c  *mhi.Controller
	m  *sim.Modem
	fn *simnet.QMIFunction

	mu   sync.Mutex
	viol []string
}

func newFN980Rig(t *testing.T) *fn980Rig {
	t.Helper()
	r := &fn980Rig{fn: simnet.NewQMIFunction(simnet.QMIConfig{})}
	// The tests check the violations themselves (one is expected).
	mr := mhitest.New(t, mhitest.Options{ProfileName: "telit-fn980-hwv1", Functions: map[string]sim.Function{"QMI": r.fn},
		Sim: sim.Options{OnViolation: func(err error) { r.mu.Lock(); r.viol = append(r.viol, err.Error()); r.mu.Unlock() }}})
	c, m := mr.Controller, mr.Modem
	r.c, r.m = c, m
	return r
}

// violations returns the host protocol violations the modem saw so far.
func (r *fn980Rig) violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.viol)
}

// TestSessionOverMHIReconnectsAfterModemReset: the whole path — an MHI
// controller drives the emulated Telit FN980 v1 (QMI is its only
// control pair) through DialMHI on a strict modem; a SYS_ERR makes the
// client fail its calls with ErrModemReset (the modem forgot its client
// IDs), and the session comes back on its own after recovery.
func TestSessionOverMHIReconnectsAfterModemReset(t *testing.T) {
	r := newFN980Rig(t)
	defer func() {
		for _, v := range r.violations() {
			t.Errorf("protocol violation: %s", v)
		}
	}()
	c, m, fn := r.c, r.m, r.fn
	cl, err := qmi.DialMHI(testCtx(t), c, qmi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var lmu sync.Mutex
	var steps []qmi.Progress
	cfg := fast(qmi.SessionConfig{APN: "internet"}, nil)
	// An hour's retry: the attempts that fail while the modem restarts
	// must not wait for it (the reset ends the back-off).
	cfg.RetryInterval = time.Hour
	cfg.OnProgress = func(p qmi.Progress) { lmu.Lock(); steps = append(steps, p); lmu.Unlock() }
	s := qmi.NewSession(cl, cfg)
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if fn.Calls() != 2 {
		t.Fatalf("modem has %d calls", fn.Calls())
	}
	if err := m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		lmu.Lock()
		var st []qmi.SessionState
		var cause error
		for _, p := range steps {
			st = append(st, p.State)
			if p.State == qmi.StateDisconnected && cause == nil {
				cause = p.Err
			}
		}
		lmu.Unlock()
		i := slices.Index(st, qmi.StateDisconnected)
		if i >= 0 && slices.Contains(st[i:], qmi.StateConnected) && fn.Calls() == 2 {
			if !errors.Is(cause, qmi.ErrModemReset) {
				t.Errorf("disconnect cause %v, want ErrModemReset", cause)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no re-connect after SYS_ERR: %v (modem calls %d)", st, fn.Calls())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestModemKeepsClientIDsWhileTheHostReopensThePort: closing the QMI port
// stops its channels (as Linux's mhi_wwan_ctrl does whenever qmicli exits)
// and reopening starts them again; a modem keeps its client IDs and calls
// across that, which `qmicli --client-no-release-cid` and a later
// `--client-cid` rely on (the kernel cross-check's qmi-wds-packet-status).
// A modem restart (SYS_ERR) forgets them. The emulated modem used to
// forget them on every channel start: the reopened port's request was
// answered INVALID_CLIENT_ID.
func TestModemKeepsClientIDsWhileTheHostReopensThePort(t *testing.T) {
	r := newFN980Rig(t)
	c, m, fn := r.c, r.m, r.fn
	ctx := testCtx(t)
	// open starts the channels (retrying while the modem recovers) and
	// returns a client on them; closing the port stops them, without
	// releasing the client IDs (Client.Close would).
	open := func() (*qmi.Client, *mhi.ControlPort) {
		t.Helper()
		for {
			port, err := c.OpenControl(ctx, "QMI", mhi.ControlOptions{})
			if err == nil {
				return qmi.NewClient(port, qmi.Options{}), port
			}
			if ctx.Err() != nil {
				t.Fatalf("open QMI: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cl, port := open()
	cid, err := cl.AllocateCID(ctx, qmi.ServiceWDS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Service(qmi.ServiceWDS, cid).Do(ctx, (&qmi.StartNetwork{APN: "internet", Family: qmi.IPv4}).Request()); err != nil {
		t.Fatalf("start network: %v", err)
	}
	port.Close()

	cl, port = open()
	st, err := cl.Service(qmi.ServiceWDS, cid).Do(ctx, qmi.NewRequest(qmi.ServiceWDS, qmi.WDSGetPacketServiceStatus))
	if err != nil {
		t.Fatalf("packet service status on client %d after the port was reopened: %v", cid, err)
	}
	// The response's TLV 0x01 is the connection status alone (the
	// indication's adds "reconfiguration required").
	if v, ok := st.Get(0x01); !ok || len(v) != 1 || qmi.ConnectionStatus(v[0]) != qmi.StatusConnected {
		t.Errorf("packet service status after reopening: TLV 0x01 %x; want connected (the call survives)", v)
	}
	if fn.Calls() != 1 {
		t.Errorf("modem calls %d after reopening, want 1", fn.Calls())
	}
	if v := r.violations(); len(v) != 0 {
		t.Errorf("violations after reopening: %q", v)
	}
	port.Close()

	if err := m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	cl, port = open()
	defer port.Close()
	_, err = cl.Service(qmi.ServiceWDS, cid).Do(ctx, qmi.NewRequest(qmi.ServiceWDS, qmi.WDSGetPacketServiceStatus))
	if !errors.Is(err, qmi.ErrInvalidClientID) {
		t.Errorf("client %d after SYS_ERR: %v, want INVALID_CLIENT_ID (a restarted modem forgot it)", cid, err)
	}
	if fn.Calls() != 0 {
		t.Errorf("modem calls %d after SYS_ERR, want 0", fn.Calls())
	}
	if v := r.violations(); len(v) != 1 {
		t.Errorf("violations %q, want the one stale client ID after SYS_ERR", v)
	}
}
