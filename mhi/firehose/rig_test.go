package firehose_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mhistack/mhistack/mhi/firehose"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/pairconn"
	"github.com/mhistack/mhistack/mhi/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fpRig is an emulated qcom-sdx55m forced into EDL and running the
// emulated flash programmer fh on FIREHOSE, with a connection to it.
type fpRig struct {
	r    *mhitest.Rig
	fh   *sim.Firehose
	conn *pairconn.Conn
	logs []string
}

func newFPRig(t *testing.T, fh *sim.Firehose) *fpRig {
	t.Helper()
	r := mhitest.New(t, mhitest.Options{ProfileName: "qcom-sdx55m", Functions: map[string]sim.Function{"FIREHOSE": fh}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Controller.EnterEDL(ctx, []byte("emulated prog_firehose")); err != nil {
		t.Fatalf("EnterEDL: %v", err)
	}
	f := &fpRig{r: r, fh: fh}
	f.open(t)
	return f
}

func (f *fpRig) open(t *testing.T) {
	t.Helper()
	conn, err := pairconn.Open(context.Background(), f.r.Controller, f.r.Host.DMA(), "FIREHOSE", pairconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.conn = conn
	t.Cleanup(func() { conn.Close() })
}

// client is a Firehose client with short waits (the emulated programmer
// answers at once; a fault test waits for the bound).
func (f *fpRig) client(raw time.Duration) *firehose.Client {
	return firehose.NewClient(f.conn, firehose.Options{
		OnLog: func(s string) { f.logs = append(f.logs, s) }, Timeout: 5 * time.Second, RawTimeout: raw,
		MaxMessage: f.conn.MaxSend(),
	})
}

func mustStorage(t *testing.T, kind string, luns ...uint64) *sim.Storage {
	t.Helper()
	s, err := sim.NewStorage(kind, luns...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
