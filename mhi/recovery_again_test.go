package mhi_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/mhistack/mhistack/mhi"
	"github.com/mhistack/mhistack/mhi/sim"
)

// TestSysErrRightAfterTheLastRestartIsRecovered: the modem crashes again
// the moment recovery's last START_CHAN completes (sim.Modem.SysErrOnStart:
// the completion and the SYS_ERR reach the host in one pass). Nothing of
// recovery waits on the device any more then, so the controller must look
// for a SYS_ERR before it declares the device recovered and go round
// again. Before, the second SYS_ERR was recorded (devState SYS_ERR) but
// never recovered: the controller reported EventRecovered with the modem
// crashed, and every command failed until PowerDown.
func TestSysErrRightAfterTheLastRestartIsRecovered(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(31, 32)), 5, 4096)

	// Recovery restarts LOOPBACK UL, then DL: the second START is the last.
	r.m.SysErrOnStart(2)
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	r.waitRecoveredTwice()
	l.exchange(t, rand.New(rand.NewPCG(33, 34)), 20, 4096)
}

// TestSysErrAsRecoveryEndsIsRecovered is the deterministic form of
// TestSysErrRightAfterTheLastRestartIsRecovered: the modem crashes after
// recovery has restarted every channel and the controller has recorded it
// (a hook holds the recovery goroutine in that window until then). Before,
// sysErrDetected saw recovery running and left the episode to it, and
// recovery ended "recovered" with the device in SYS_ERR for good.
func TestSysErrAsRecoveryEndsIsRecovered(t *testing.T) {
	r := newRig(t, "foxconn-sdx55", sim.Options{}, mhi.Options{})
	r.powerUp()
	l := newLoop(r, "LOOPBACK", 4096, 8, 8)
	l.exchange(t, rand.New(rand.NewPCG(35, 36)), 5, 4096)

	hookErr := r.failAgainAsRecoveryEnds(r.m.TriggerSysErr)
	if err := r.m.TriggerSysErr(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the second SYS_ERR", func() bool { return len(hookErr) == 1 })
	if err := <-hookErr; err != nil {
		t.Fatal(err)
	}
	r.waitRecoveredTwice()
	l.exchange(t, rand.New(rand.NewPCG(37, 38)), 20, 4096)
}

// waitRecoveredTwice waits until the controller has seen two SYS_ERRs and
// is recovered from both: in mission mode and M0, its last event
// EventRecovered (one recovery that went round again, or two), with the
// modem in M0.
func (r *rig) waitRecoveredTwice() {
	r.t.Helper()
	waitFor(r.t, 10*time.Second, "recovery from both SYS_ERRs", func() bool {
		st, _, mission := r.c.State()
		s := r.c.Stats()
		r.mu.Lock()
		last := r.events[len(r.events)-1].Kind
		r.mu.Unlock()
		return s.SysErrs == 2 && s.Recoveries >= 1 && st == mhi.StateM0 && mission && last == mhi.EventRecovered
	})
	if st, _ := r.m.State(); st != mhi.StateM0 {
		r.t.Fatalf("modem in %s after recovery", st)
	}
}

// failAgainAsRecoveryEnds makes the modem fail again (fail: TriggerSysErr,
// or a TriggerCrash) once, when recovery has restarted every channel and
// is about to end: a hook holds the recovery goroutine until the
// controller has recorded the new SYS_ERR. The returned channel receives
// the hook's error (nil when the SYS_ERR was recorded).
func (r *rig) failAgainAsRecoveryEnds(fail func() error) <-chan error {
	var once sync.Once
	hookErr := make(chan error, 1)
	mhi.SetRecoveryEndHookForTest(r.c, func() {
		once.Do(func() {
			err := fail()
			deadline := time.Now().Add(5 * time.Second)
			for err == nil {
				if st, _, _ := r.c.State(); st == mhi.StateSysErr {
					break
				}
				if time.Now().After(deadline) {
					err = errors.New("the second SYS_ERR was not recorded within 5s")
				}
				time.Sleep(100 * time.Microsecond)
			}
			hookErr <- err
		})
	})
	return hookErr
}
