package link_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi/sim"
)

// A modem that hangs in SYS_ERR is brought back by a function-level reset
// (docs/RELIABILITY.md "When recovery fails"): the endpoint gets its
// buffers back after the reset, refills at EventRecovered, and traffic
// resumes on the same endpoint.
func TestFunctionLevelResetRecoveryRefillsAndTrafficResumes(t *testing.T) {
	r := newRig(t, rigOptions{fn: &sim.Loopback{}, link: link.Options{NoGRO: true}, timeout: time.Second})
	write(t, r.ep, udp4(t, 1, 100))
	r.snk.waitFor(t, 1, 5*time.Second)
	if err := r.m.Hang(); err != nil {
		t.Fatal(err)
	}
	ul, dl := r.ep.Channels()
	waitUntil(t, 15*time.Second, "recovery through a function-level reset", func() bool {
		return r.c.Stats().Recoveries == 1 && dl.FreeCount() == 0 && ul.Outstanding() == 0
	})
	write(t, r.ep, udp4(t, 2, 100))
	got := r.snk.waitFor(t, 2, 5*time.Second)
	if !bytes.Equal(got[1], udp4(t, 2, 100)) {
		t.Fatal("packet after recovery differs")
	}
}
