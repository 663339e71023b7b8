package qmi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/mhi/mhitest"
	"github.com/mhistack/mhistack/mhi/sim"
)

var proxySeq atomic.Int32

// proxyRig is the emulated QMI function over a pipe, mhistack's client
// on it and a proxy on a socket name of its own (tests run in parallel
// with each other and with a real qmi-proxy). Host violations are
// collected, not failed, so a test can check for one.
type proxyRig struct {
	host *qmi.Client
	fn   *simnet.QMIFunction
	p    *qmi.Proxy

	mu         sync.Mutex
	violations []string
}

func newProxyRig(t testing.TB, opts qmi.ProxyOptions) *proxyRig {
	t.Helper()
	r := &proxyRig{}
	r.fn = simnet.NewQMIFunction(simnet.QMIConfig{OnViolation: func(err error) {
		r.mu.Lock()
		r.violations = append(r.violations, err.Error())
		r.mu.Unlock()
	}})
	hostEnd, dev := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); r.fn.Serve(dev) }()
	r.host = qmi.NewClient(qmi.NewStreamTransport(hostEnd), qmi.Options{})
	t.Cleanup(func() { r.host.Close(); <-done })
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("mhistack-qmi-test-%d-%d", os.Getpid(), proxySeq.Add(1))
	}
	p, err := qmi.ListenProxy(r.host, opts)
	if err != nil {
		t.Fatalf("ListenProxy: %v", err)
	}
	r.p = p
	t.Cleanup(func() { p.Close() })
	return r
}

func (r *proxyRig) takeViolations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.violations
	r.violations = nil
	return v
}

func (r *proxyRig) dial(t *testing.T) *qmi.Client {
	t.Helper()
	c, err := qmi.DialProxy(testCtx(t), r.p.Name(), "/dev/wwan0qmi0", qmi.Options{})
	if err != nil {
		t.Fatalf("DialProxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawClient speaks the proxy protocol byte by byte, as libqmi does.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	dec  qmi.Decoder
}

func (r *proxyRig) raw(t *testing.T) *rawClient {
	t.Helper()
	conn, err := net.Dial("unix", "@"+r.p.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawClient{t: t, conn: conn}
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) send(m *qmi.Message) {
	c.t.Helper()
	b, err := m.Marshal()
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(b)
}

// next returns the next frame from the proxy (5 s at most).
func (c *rawClient) next() *qmi.Message {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for {
		m, err := c.dec.Next()
		if err != nil {
			c.t.Fatalf("proxy sent a malformed frame: %v", err)
		}
		if m != nil {
			return m
		}
		n, err := c.conn.Read(buf)
		if err != nil {
			c.t.Fatalf("reading from the proxy: %v", err)
		}
		c.dec.Write(buf[:n])
	}
}

// call sends a request and returns the response, which must carry the
// request's transaction ID and message ID.
func (c *rawClient) call(m *qmi.Message) *qmi.Message {
	c.t.Helper()
	c.send(m)
	r := c.next()
	if r.Kind != qmi.Response || !r.FromModem || r.TID != m.TID || r.ID != m.ID || r.Service != m.Service || r.Client != m.Client {
		c.t.Fatalf("request %s answered by %s", m, r)
	}
	return r
}

func req(s qmi.Service, client uint8, tid, id uint16) *qmi.Message {
	m := qmi.NewRequest(s, id)
	m.Client, m.TID = client, tid
	return m
}

func TestProxyForwardsClientsRequestsWithTheirOwnTransactionIDs(t *testing.T) {
	r := newProxyRig(t, qmi.ProxyOptions{})
	ctx := testCtx(t)
	own, err := r.host.AllocateCID(ctx, qmi.ServiceDMS)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 3 {
		c := r.dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each client's transaction IDs start at 1 and collide
			// with the others' and mhistack's.
			dms, err := c.AllocateCID(ctx, qmi.ServiceDMS)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			nas, err := c.AllocateCID(ctx, qmi.ServiceNAS)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			for range 5 {
				m, err := c.Service(qmi.ServiceDMS, dms).Do(ctx, qmi.NewRequest(qmi.ServiceDMS, qmi.DMSGetIDs))
				if err != nil || qmi.ParseIDs(m).IMEI == "" {
					t.Errorf("client %d DMS Get IDs: %v", i, err)
					return
				}
				m, err = c.Service(qmi.ServiceNAS, nas).Do(ctx, qmi.NewRequest(qmi.ServiceNAS, qmi.NASGetServingSystem))
				if err != nil {
					t.Errorf("client %d NAS Get Serving System: %v", i, err)
					return
				}
				if ss, err := qmi.ParseServingSystem(m); err != nil || ss.Registration != qmi.Registered {
					t.Errorf("client %d serving system %+v, %v", i, ss, err)
				}
			}
		}()
	}
	for range 5 {
		if _, err := r.host.Service(qmi.ServiceDMS, own).Do(ctx, qmi.NewRequest(qmi.ServiceDMS, qmi.DMSGetIDs)); err != nil {
			t.Errorf("mhistack's own request: %v", err)
		}
	}
	wg.Wait()
	if held, _ := r.p.ClientIDs(); len(held) != 6 {
		t.Errorf("proxy tracks %v, want 6 client IDs", held)
	}
	if v := r.takeViolations(); len(v) != 0 {
		t.Errorf("modem saw violations: %q", v)
	}
}

// TestProxyProtocol drives the proxy with hand-made frames: the open
// handshake, CTL transaction IDs restored, client IDs held by mhistack
// refused, CTL Sync answered locally, a malformed request answered.
func TestProxyProtocol(t *testing.T) {
	r := newProxyRig(t, qmi.ProxyOptions{DevicePath: "/dev/wwan0qmi0"})
	ctx := testCtx(t)
	own, err := r.host.AllocateCID(ctx, qmi.ServiceWDS)
	if err != nil {
		t.Fatal(err)
	}
	c := r.raw(t)
	// Before the open: not ready, nothing forwarded.
	if err := c.call(req(qmi.ServiceCTL, 0, 1, qmi.CTLGetVersionInfo)).Result(); !errors.Is(err, qmi.ErrDeviceNotReady) {
		t.Errorf("request before the open: %v", err)
	}
	if err := c.call(req(qmi.ServiceCTL, 0, 2, qmi.CTLInternalProxyOpen)).Result(); !errors.Is(err, qmi.ErrMissingArgument) {
		t.Errorf("open without a path: %v", err)
	}
	if err := c.call(req(qmi.ServiceCTL, 0, 3, qmi.CTLInternalProxyOpen).AddString(0x01, "/dev/other")).Result(); !errors.Is(err, qmi.ErrInvalidArgument) {
		t.Errorf("open of another device: %v", err)
	}
	// The open as libqmi frames it (TID 4), and the answer byte for
	// byte, written in two pieces to check the stream reassembly.
	open := append([]byte{0x01, 0x1c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0xff, 0x11, 0x00, 0x01, 0x0e, 0x00}, "/dev/wwan0qmi0"...)
	c.write(open[:7])
	c.write(open[7:])
	got, _ := c.next().Marshal()
	want := []byte{0x01, 0x12, 0x00, 0x80, 0x00, 0x00, 0x01, 0x04, 0x00, 0xff, 0x07, 0x00, 0x02, 0x04, 0x00, 0, 0, 0, 0}
	if !bytes.Equal(got, want) {
		t.Errorf("open answered % x, want % x", got, want)
	}
	// CTL: the client's 8-bit transaction IDs come back.
	vi := c.call(req(qmi.ServiceCTL, 0, 200, qmi.CTLGetVersionInfo))
	if list, err := qmi.ParseVersionInfo(vi); err != nil || len(list) < 6 {
		t.Errorf("version info %v, %v", list, err)
	}
	alloc := qmi.AllocateCIDRequest(qmi.ServiceWDS)
	alloc.TID = 7
	id, err := qmi.ParseClientID(c.call(alloc))
	if err != nil || id.Service != qmi.ServiceWDS || id.Client == own {
		t.Fatalf("allocated %+v, %v (mhistack holds %d)", id, err, own)
	}
	if held, _ := r.p.ClientIDs(); len(held) != 1 || held[0] != id {
		t.Errorf("proxy tracks %v, want [%v]", held, id)
	}
	// The client's own ID works, with its 16-bit transaction ID.
	if err := c.call(req(qmi.ServiceWDS, id.Client, 0xBEEF, qmi.WDSGetPacketServiceStatus)).Result(); err != nil {
		t.Errorf("own client ID: %v", err)
	}
	// mhistack's ID is neither usable nor releasable through the proxy.
	before := r.fn.Stats().Requests
	if err := c.call(req(qmi.ServiceWDS, own, 9, qmi.WDSGetPacketServiceStatus)).Result(); !errors.Is(err, qmi.ErrInvalidClientID) {
		t.Errorf("mhistack's client ID used by a proxy client: %v", err)
	}
	rel := qmi.ReleaseCIDRequest(qmi.ClientID{Service: qmi.ServiceWDS, Client: own})
	rel.TID = 10
	if err := c.call(rel).Result(); !errors.Is(err, qmi.ErrInvalidClientID) {
		t.Errorf("mhistack's client ID released by a proxy client: %v", err)
	}
	if n := r.fn.Stats().Requests; n != before {
		t.Errorf("%d refused requests reached the modem", n-before)
	}
	// An ID nobody holds is forwarded; the modem's INVALID_CLIENT_ID
	// means the client holds nothing.
	if err := c.call(req(qmi.ServiceNAS, 200, 1, qmi.NASGetServingSystem)).Result(); !errors.Is(err, qmi.ErrInvalidClientID) {
		t.Errorf("unallocated client ID: %v", err)
	}
	if held, _ := r.p.ClientIDs(); len(held) != 1 {
		t.Errorf("after the modem refused an ID the proxy tracks %v", held)
	}
	if v := r.takeViolations(); len(v) != 1 || !strings.Contains(v[0], "does not hold") {
		t.Errorf("modem violations %q, want the unallocated client ID", v)
	}
	// A malformed request (TLV length past the frame) is answered.
	c.write([]byte{0x01, 0x0f, 0x00, 0x00, 0x02, id.Client, 0x00, 0x21, 0x00, 0x25, 0x00, 0x03, 0x00, 0x01, 0x05, 0x00})
	if m := c.next(); m.TID != 0x21 || !errors.Is(m.Result(), qmi.ErrMalformedMessage) {
		t.Errorf("malformed request answered by %s (%v)", m, m.Result())
	}
	// CTL Sync releases the client's IDs only.
	sync := req(qmi.ServiceCTL, 0, 11, qmi.CTLSync)
	if err := c.call(sync).Result(); err != nil {
		t.Errorf("sync: %v", err)
	}
	if held, _ := r.p.ClientIDs(); len(held) != 0 {
		t.Errorf("after sync the proxy tracks %v", held)
	}
	if _, err := r.host.Service(qmi.ServiceWDS, own).Do(ctx, qmi.NewRequest(qmi.ServiceWDS, qmi.WDSGetPacketServiceStatus)); err != nil {
		t.Errorf("mhistack's client ID after a proxy client's sync: %v", err)
	}
	if v := r.takeViolations(); len(v) != 0 {
		t.Errorf("modem saw violations: %q", v)
	}
}

// TestProxyRoutesIndications: each client gets the indications for its
// own client IDs only; mhistack gets all of them.
func TestProxyRoutesIndications(t *testing.T) {
	r := newProxyRig(t, qmi.ProxyOptions{})
	ctx := testCtx(t)
	type counter struct {
		cid         uint8
		mine, else_ atomic.Int32
	}
	var cs []*counter
	for range 2 {
		c := r.dial(t)
		nas, err := c.AllocateCID(ctx, qmi.ServiceNAS)
		if err != nil {
			t.Fatal(err)
		}
		k := &counter{cid: nas}
		cs = append(cs, k)
		cancel := c.Subscribe(func(m *qmi.Message) {
			if m.Service == qmi.ServiceNAS && m.ID == qmi.NASGetServingSystem && m.Client == k.cid {
				k.mine.Add(1)
			} else {
				k.else_.Add(1)
			}
		})
		t.Cleanup(cancel)
	}
	if cs[0].cid == cs[1].cid {
		t.Fatalf("two clients got client ID %d", cs[0].cid)
	}
	r.fn.Network().NetworkDetach(mbim.NwError(0))
	waitUntil(t, "both clients' serving system indications", func() bool {
		return cs[0].mine.Load() >= 1 && cs[1].mine.Load() >= 1
	})
	for i, k := range cs {
		if n := k.else_.Load(); n != 0 {
			t.Errorf("client %d got %d indications for other client IDs", i, n)
		}
	}
}

// TestProxyDisownsUnreleasedClientIDs: a client that leaves without
// releasing (qmicli --client-no-release-cid) leaves its IDs for a later
// client to use (--client-cid); beyond MaxDisowned the oldest are
// released at the modem; Close releases the rest.
func TestProxyDisownsUnreleasedClientIDs(t *testing.T) {
	r := newProxyRig(t, qmi.ProxyOptions{MaxDisowned: 1})
	openRaw := func() *rawClient {
		c := r.raw(t)
		if err := c.call(req(qmi.ServiceCTL, 0, 1, qmi.CTLInternalProxyOpen).AddString(0x01, "/dev/cdc-wdm0")).Result(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	leave := func() qmi.ClientID {
		c := openRaw()
		alloc := qmi.AllocateCIDRequest(qmi.ServiceWDS)
		alloc.TID = 2
		id, err := qmi.ParseClientID(c.call(alloc))
		if err != nil {
			t.Fatal(err)
		}
		c.conn.Close()
		waitUntil(t, "the client gone", func() bool { return r.p.Clients() == 0 })
		return id
	}
	// Claimed at once after its holder hung up, before the proxy may
	// have noticed: the claim waits for the holder to leave.
	for range 20 {
		c1 := openRaw()
		alloc := qmi.AllocateCIDRequest(qmi.ServiceDMS)
		alloc.TID = 2
		id, err := qmi.ParseClientID(c1.call(alloc))
		if err != nil {
			t.Fatal(err)
		}
		c1.conn.Close()
		c2 := openRaw()
		if err := c2.call(req(qmi.ServiceDMS, id.Client, 3, qmi.DMSGetIDs)).Result(); err != nil {
			t.Fatalf("client ID claimed right after its holder hung up: %v", err)
		}
		rel := qmi.ReleaseCIDRequest(id)
		rel.TID = 4
		if err := c2.call(rel).Result(); err != nil {
			t.Fatal(err)
		}
		c2.conn.Close()
		waitUntil(t, "the clients gone", func() bool { return r.p.Clients() == 0 })
	}
	first := leave()
	if held, dis := r.p.ClientIDs(); len(held) != 0 || len(dis) != 1 || dis[0] != first {
		t.Fatalf("after the client left: held %v disowned %v", held, dis)
	}
	// A later client uses it: it is its own again.
	c := openRaw()
	if err := c.call(req(qmi.ServiceWDS, first.Client, 3, qmi.WDSGetPacketServiceStatus)).Result(); err != nil {
		t.Fatalf("re-owned client ID: %v", err)
	}
	if held, dis := r.p.ClientIDs(); len(held) != 1 || len(dis) != 0 {
		t.Fatalf("after re-owning: held %v disowned %v", held, dis)
	}
	c.conn.Close()
	waitUntil(t, "the client gone", func() bool { return r.p.Clients() == 0 })
	// A second one over the bound: the oldest is released at the modem.
	second := leave()
	if _, dis := r.p.ClientIDs(); len(dis) != 1 || dis[0] != second {
		t.Fatalf("disowned %v, want [%v]", dis, second)
	}
	if _, err := r.host.Service(qmi.ServiceWDS, first.Client).Do(testCtx(t), qmi.NewRequest(qmi.ServiceWDS, qmi.WDSGetPacketServiceStatus)); !errors.Is(err, qmi.ErrInvalidClientID) {
		t.Errorf("the oldest disowned client ID still works at the modem: %v", err)
	}
	r.takeViolations() // that request was one
	r.p.Close()
	if _, err := r.host.Service(qmi.ServiceWDS, second.Client).Do(testCtx(t), qmi.NewRequest(qmi.ServiceWDS, qmi.WDSGetPacketServiceStatus)); !errors.Is(err, qmi.ErrInvalidClientID) {
		t.Errorf("a disowned client ID survived the proxy's Close: %v", err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestQmicliThroughProxy runs Debian's unmodified qmicli (libqmi-utils)
// through the proxy against the emulated Telit FN980 v1 (QMI only) on
// the MHI path, while mhistack's own session holds the data connection.
func TestQmicliThroughProxy(t *testing.T) {
	qmicli, err := exec.LookPath("qmicli")
	if err != nil {
		if os.Getenv("MHISTACK_REQUIRE_QMICLI") == "1" {
			t.Fatalf("qmicli not found (apt-get install libqmi-utils): %v", err)
		}
		t.Skip("qmicli not installed (libqmi-utils); CI installs it and sets MHISTACK_REQUIRE_QMICLI=1")
	}
	fn := simnet.NewQMIFunction(simnet.QMIConfig{})
	mc := mhitest.New(t, mhitest.Options{ProfileName: "telit-fn980-hwv1", Functions: map[string]sim.Function{"QMI": fn}}).Controller
	host, err := qmi.DialMHI(testCtx(t), mc, qmi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	s := qmi.NewSession(host, fast(qmi.SessionConfig{APN: "internet"}, nil))
	defer s.Close(context.Background())
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// qmicli knows only the default name, which is one per network
	// namespace: another run of this test may hold it for a moment, a
	// libqmi qmi-proxy (or ModemManager) for good.
	var p *qmi.Proxy
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if p, err = qmi.ListenProxy(host, qmi.ProxyOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cannot listen on @%s (is a libqmi qmi-proxy or ModemManager running?): %v", qmi.ProxySocket, err)
		}
	}
	defer p.Close()
	// libqmi wants the -d path to be a special file; a FIFO will do. It
	// cannot tell QMI from MBIM on a FIFO: --device-open-qmi says.
	devPath := filepath.Join(t.TempDir(), "wwan0qmi0")
	if err := syscall.Mkfifo(devPath, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, qmicli, append([]string{"-d", devPath, "-p", "--device-open-qmi"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("qmicli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("qmicli %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	expect := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("qmicli output lacks %q", w)
			}
		}
	}
	expect(run("--dms-get-ids"), "IMEI: '867929060000017'")
	expect(run("--nas-get-serving-system"), "Registration state: 'registered'", "PS: 'attached'", "Description: 'mhistack'")
	// What else people type; --device-open-sync sends CTL Sync, which
	// must not reach the modem (it would drop mhistack's client IDs).
	expect(run("--device-open-sync", "--dms-get-model"), "Model:")
	expect(run("--dms-get-revision"), "Revision:")
	expect(run("--uim-get-card-status"), "Card state: 'present'")
	expect(run("--nas-get-signal-strength"), "Current:")
	expect(run("--wds-get-packet-service-status"), "Connection status: 'disconnected'")
	// A client ID kept across invocations, as qmi-network does.
	quoted := func(out, after string) string {
		t.Helper()
		i := strings.Index(out, after+"'")
		if i < 0 {
			t.Fatalf("qmicli printed no %q:\n%s", after, out)
		}
		v := out[i+len(after)+1:]
		return v[:strings.IndexByte(v, '\'')]
	}
	cid := quoted(run("--dms-get-ids", "--client-no-release-cid"), "CID: ")
	waitUntil(t, "qmicli's connection gone", func() bool { return p.Clients() == 0 })
	if _, dis := p.ClientIDs(); len(dis) != 1 {
		t.Errorf("disowned client IDs %v, want qmicli's DMS %s", dis, cid)
	}
	expect(run("--dms-get-ids", "--client-cid="+cid), "IMEI: '867929060000017'")
	// A second call of its own on mux ID 2, next to mhistack's on mux 1
	// (with QMAP on, the modem wants the client bound to a mux first).
	wds := quoted(run("--wds-bind-mux-data-port=mux-id=2,ep-iface-number=4,ep-type=pcie", "--client-no-release-cid"), "CID: ")
	handle := quoted(run("--client-cid="+wds, "--client-no-release-cid", "--wds-start-network=apn=internet,ip-type=4"), "Packet data handle: ")
	if fn.Calls() != 3 {
		t.Errorf("the modem has %d calls with qmicli's, want 3", fn.Calls())
	}
	// Mux ID 2 is the APN's second session: the next /30 of its pool
	// (mhistack's call on mux 1 has 10.0.0.2).
	expect(run("--client-cid="+wds, "--client-no-release-cid", "--wds-get-current-settings"), "IPv4 address: 10.0.0.6", "IPv4 gateway address: 10.0.0.5", "MTU: 1500")
	run("--client-cid="+wds, "--wds-stop-network="+handle)
	waitUntil(t, "qmicli's connection gone", func() bool { return p.Clients() == 0 })
	if held, dis := p.ClientIDs(); len(held)+len(dis) != 0 {
		t.Errorf("after qmicli released its client IDs the proxy still tracks %v %v", held, dis)
	}
	if fn.Calls() != 2 {
		t.Errorf("the modem has %d calls after qmicli, want mhistack's 2", fn.Calls())
	}
	if st, _ := s.State(); st != qmi.StateConnected {
		t.Errorf("host session %v after qmicli", st)
	}
}

// TestProxyWaitsForSlowAnswersPastTheClientTimeout: a forwarded request
// is bounded by ProxyOptions.RequestTimeout, not by mhistack's client
// timeout (a NAS network scan takes minutes; libqmi's proxy allows 300
// s), and still by it when set.
func TestProxyWaitsForSlowAnswersPastTheClientTimeout(t *testing.T) {
	hostEnd, modemEnd := net.Pipe()
	host := qmi.NewClient(qmi.NewStreamTransport(hostEnd), qmi.Options{Timeout: 50 * time.Millisecond})
	defer host.Close()
	// A modem that answers each NAS request when the test says so and
	// everything else at once.
	release := make(chan struct{})
	modemDone := make(chan struct{})
	go func() {
		defer close(modemDone)
		var dec qmi.Decoder
		buf := make([]byte, 4096)
		for {
			n, err := modemEnd.Read(buf)
			if err != nil {
				return
			}
			dec.Write(buf[:n])
			for {
				m, err := dec.Next()
				if m == nil || err != nil {
					break
				}
				if m.Service == qmi.ServiceNAS {
					<-release
				}
				b, _ := m.Reply(qmi.ErrNone).Marshal()
				if _, err := modemEnd.Write(b); err != nil {
					return
				}
			}
		}
	}()
	defer func() { modemEnd.Close(); <-modemDone }()
	for _, tc := range []struct {
		timeout time.Duration
		want    error
	}{{0, nil}, {20 * time.Millisecond, qmi.ErrAborted}} {
		p, err := qmi.ListenProxy(host, qmi.ProxyOptions{RequestTimeout: tc.timeout,
			Name: fmt.Sprintf("mhistack-qmi-test-%d-%d", os.Getpid(), proxySeq.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		c := (&proxyRig{p: p}).raw(t)
		if err := c.call(req(qmi.ServiceCTL, 0, 1, qmi.CTLInternalProxyOpen).AddString(0x01, "/dev/x")).Result(); err != nil {
			t.Fatal(err)
		}
		c.send(req(qmi.ServiceNAS, 5, 2, 0x21)) // NAS Network Scan
		time.Sleep(100 * time.Millisecond)      // past the host client's 50 ms
		release <- struct{}{}
		r := c.next()
		if r.TID != 2 || !errors.Is(r.Result(), tc.want) {
			t.Errorf("RequestTimeout %v: answer %s (%v), want %v", tc.timeout, r, r.Result(), tc.want)
		}
		c.conn.Close()
		p.Close()
	}
}

// TestProxyForgetsClientIDsOnModemReset: after a modem reset nobody
// holds a client ID (the modem forgot them), so the proxy tracks none.
func TestProxyForgetsClientIDsOnModemReset(t *testing.T) {
	r := newProxyRig(t, qmi.ProxyOptions{})
	c := r.dial(t)
	if _, err := c.AllocateCID(testCtx(t), qmi.ServiceNAS); err != nil {
		t.Fatal(err)
	}
	if held, _ := r.p.ClientIDs(); len(held) != 1 {
		t.Fatalf("proxy tracks %v, want the NAS client ID", held)
	}
	r.host.NotifyReset()
	if held, dis := r.p.ClientIDs(); len(held)+len(dis) != 0 {
		t.Errorf("after a modem reset the proxy tracks %v %v", held, dis)
	}
}
