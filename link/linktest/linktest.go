// Package linktest builds the test rig of the link endpoint, in the style
// of net/http/httptest: mhi/mhitest's strict emulated modem and
// controller in mission mode, with a *link.Endpoint on a data channel
// pair and, optionally, a function of the modem (a sim.Function, such as
// one of link/simnet's networks) behind that pair.
//
// New is for tests (t.Fatal when the rig cannot be built, teardown in
// t.Cleanup, host protocol violations and DMA faults reported with
// t.Error); Start returns errors, for harnesses that are not tests.
//
//	cn, _ := simnet.NewCarrierNetwork(simnet.CarrierOptions{})
//	defer cn.Close()
//	r := linktest.New(t, linktest.Options{Function: cn})
//	r.Endpoint.Attach(dispatcher)
package linktest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/mhistack/mhistack/link"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/sim"
)

// Options configures a rig: the modem and the controller (mhitest's
// options; NoPowerUp is ignored, the endpoint needs mission mode), the
// endpoint, and the function behind its channel pair.
type Options struct {
	mhitest.Options
	// Link configures the endpoint; its Channel (default
	// link.DefaultChannel) is the pair Function serves.
	Link link.Options
	// Function, when set, serves the endpoint's channel pair on the
	// modem (it takes the place of an entry of Options.Functions for
	// that channel).
	Function sim.Function
}

// Rig is mhitest's rig with a link endpoint on a channel pair. The
// endpoint is not attached: the test attaches its dispatcher or stack.
type Rig struct {
	*mhitest.Rig
	Endpoint *link.Endpoint

	closeOnce sync.Once
	closeErr  error
}

// Start builds the rig: the modem and the controller in mission mode
// (mhitest.Start), then the endpoint (link.New, bounded by
// mhitest.DefaultPowerUpTimeout).
func Start(o Options) (*Rig, error) {
	mo := o.Options
	mo.NoPowerUp = false
	if o.Function != nil {
		ch := o.Link.Channel
		if ch == "" {
			ch = link.DefaultChannel
		}
		fns := make(map[string]sim.Function, len(mo.Functions)+1)
		for k, v := range mo.Functions {
			fns[k] = v
		}
		fns[ch] = o.Function
		mo.Functions = fns
	}
	mr, err := mhitest.Start(mo)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), mhitest.DefaultPowerUpTimeout)
	defer cancel()
	ep, err := link.New(ctx, mr.Controller, o.Link)
	if err != nil {
		mr.Close()
		return nil, fmt.Errorf("link.New: %w", err)
	}
	return &Rig{Rig: mr, Endpoint: ep}, nil
}

// New is Start for a test: it fails the test (t.Fatal) when the rig
// cannot be built, and closes the rig in t.Cleanup, reporting with
// t.Error what Close returns.
func New(t testing.TB, o Options) *Rig {
	t.Helper()
	r, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mhitest.ReportClose(t, r.Close) })
	return r
}

// Close closes the endpoint (a gVisor stack that owns it may have closed
// it already: Endpoint.Close is idempotent), waits for its goroutines,
// and closes the modem and the controller (mhitest.Rig.Close), returning
// the errors and the rig's failures. A second call returns what the first
// did.
func (r *Rig) Close() error {
	r.closeOnce.Do(func() {
		r.Endpoint.Close()
		r.Endpoint.Wait()
		r.closeErr = r.Rig.Close()
	})
	return r.closeErr
}
