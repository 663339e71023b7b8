package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mhistack/mhistack/link/radio"
	"github.com/mhistack/mhistack/link/simnet"
	mstack "github.com/mhistack/mhistack/stack"
	"github.com/mhistack/mhistack/stack/proxy"
)

// A page is pageObjects objects of 2–200 KB (sizes from a fixed seed),
// fetched over pageConns keep-alive connections, as a browser fetches a
// page from one origin (6 connections per origin).
const (
	pageObjects = 50
	pageConns   = 6
	// pageRounds is the warm pages per path in a run: a page takes
	// 15–40 ms, and the median of 3 swung with every scheduling hiccup
	// of a shared machine.
	pageRounds = 20
)

// pageSizes are the objects' sizes, the same in every run.
func pageSizes() []int {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := make([]int, pageObjects)
	for i := range sizes {
		sizes[i] = 2000 + r.IntN(198001)
	}
	return sizes
}

// proxyPaths are the ways to the origin that proxyTable compares; key
// prefixes a run's sample.
var proxyPaths = []struct{ key, name string }{
	{"direct", "direct (stack.Dial)"},
	{"socks", "mhiproxy SOCKS5"},
	{"http", "mhiproxy HTTP"},
}

// proxyAB is -proxy-ab: table 11 runs ab -k after the page (false: the
// page rows alone, a quicker look); proxyRadio is -proxy-radio: a radio
// preset on the page's carrier network ("": none, as table 11 is);
// proxyOnly is -proxy-paths: the keys of the paths to fetch the page
// over (comma-separated; "": all), so that a CPU profile (-cpuprofile)
// sees one path alone.
var (
	proxyAB    = true
	proxyRadio string
	proxyOnly  string
)

// pathRuns reports whether -proxy-paths lets path i run.
func pathRuns(i int) bool {
	return proxyOnly == "" || slices.Contains(strings.Split(proxyOnly, ","), proxyPaths[i].key)
}

// proxyTable fetches a page over the emulated modem directly through the
// stack and through the proxy that mhiproxy serves (package proxy on
// the same stack), and runs ab -k through the HTTP proxy.
func (c *config) proxyTable() (*table, error) {
	var carrier simnet.CarrierOptions
	radioNote := "no radio model"
	if proxyRadio != "" {
		cfg, err := radio.Preset(proxyRadio)
		if err != nil {
			return nil, fmt.Errorf("-proxy-radio: %w", err)
		}
		carrier.Radio = &cfg
		radioNote = "the radio preset " + proxyRadio + " on its carrier network (docs/RADIO.md)"
	}
	rounds := pageRounds
	if c.quick {
		rounds = 3
	}
	res, err := c.runAll([]string{"page"}, func(int) (sample, error) { return pageRun(carrier, rounds) })
	if err != nil {
		return nil, err
	}
	s := res[0]
	total := 0
	for _, n := range pageSizes() {
		total += n
	}
	t := &table{
		title: "11. Proxy: a page of 50 objects through mhiproxy against direct",
		intro: fmt.Sprintf("stack.Open on the emulated modem (qcom-sdx55m, %s); a net/http server on the host's "+
			"loopback (198.18.0.1 through the carrier) serves %d objects of 2–200 KB (fixed seeded sizes, %.1f MB in all). "+
			"A net/http client fetches them over %d keep-alive connections: directly through the stack (its DialContext), "+
			"through package proxy's server on that stack as mhiproxy runs it, by SOCKS5 (CONNECT per connection) and as an "+
			"HTTP proxy (absolute URIs, origin connections pooled); the three clients share one stack, origin and proxy per run. "+
			"Cold: each client's first page, connections opened on the way; warm: %d more pages per path on the open "+
			"connections, interleaved (one page of each path per round, the order rotated every round), the median per run. "+
			"warm / direct: the median over the rounds of a path's page time over the direct page's of the same round, so that "+
			"a change of load between rounds cancels. CPU: getrusage of the bench process (client, proxy, stack, emulated modem, "+
			"carrier and origin all run in it) over each warm page, per page: it does not count the time spent waiting for a "+
			"core that other processes hold, so it is the cost a path adds on a loaded machine. Median of the runs (range).",
			radioNote, pageObjects, float64(total)/1e6, pageConns, rounds),
		header: []string{"path", "cold page ms", "warm page ms", "warm / direct", "CPU ms per warm page", "CPU / direct"},
	}
	for i, p := range proxyPaths {
		if !pathRuns(i) {
			continue
		}
		ratio, cpuRatio := "1.00", "1.00"
		if i > 0 {
			ratio, cpuRatio = s.medRange(p.key+"_ratio", 2), s.medRange(p.key+"_cpu_ratio", 2)
		}
		t.rows = append(t.rows, []string{p.name, s.medRange(p.key+"_cold", 1), s.medRange(p.key+"_warm", 1),
			ratio, s.medRange(p.key+"_cpu", 1), cpuRatio})
	}
	for _, p := range proxyPaths[1:] {
		if len(s.values(p.key+"_ratio")) == 0 {
			continue
		}
		r := s.med(p.key + "_ratio")
		verdict := "meets"
		if r > 1.2 {
			verdict = "misses"
		}
		t.notes = append(t.notes, fmt.Sprintf("%s: a warm page takes %.2f× direct; %s the target of ≤ 1.2×.", p.name, r, verdict))
	}
	if !proxyAB {
		return t, nil
	}
	ab, err := c.abRatio()
	if err != nil {
		t.notes = append(t.notes, "ab -k: not measured: "+err.Error())
	} else {
		t.notes = append(t.notes, ab)
	}
	return t, nil
}

// pageEnv is a stack, a host origin and a proxy on the stack.
type pageEnv struct {
	st     *mstack.Stack
	origin *http.Server
	srv    *proxy.Server
	port   int    // the origin's port on the host's loopback
	paddr  string // the proxy's address
	done   chan struct{}
}

func openPageEnv(sizes []int, carrier simnet.CarrierOptions) (*pageEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := mstack.Open(ctx, mstack.Options{Device: "sim", Sim: mstack.SimOptions{Carrier: carrier}})
	if err != nil {
		return nil, err
	}
	blob := bytes.Repeat([]byte("mhistack"), 200001/8+1)
	mux := http.NewServeMux()
	mux.HandleFunc("/obj/{i}", func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.PathValue("i"))
		if err != nil || i < 0 || i >= len(sizes) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(sizes[i]))
		w.Write(blob[:sizes[i]])
	})
	e := &pageEnv{st: st, origin: &http.Server{Handler: mux}, done: make(chan struct{}, 2)}
	oln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		return nil, err
	}
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		oln.Close()
		st.Close()
		return nil, err
	}
	e.port = oln.Addr().(*net.TCPAddr).Port
	e.paddr = pln.Addr().String()
	e.srv = &proxy.Server{Dialer: st, Resolver: st}
	go func() { e.origin.Serve(oln); e.done <- struct{}{} }()
	go func() { e.srv.Serve(pln); e.done <- struct{}{} }()
	return e, nil
}

func (e *pageEnv) close() error {
	e.srv.Close()
	e.origin.Close()
	<-e.done
	<-e.done
	return e.st.Close()
}

// client is a keep-alive HTTP client taking path i of proxyPaths. Every
// path's client is the same but for how it reaches the origin.
func (e *pageEnv) client(i int) *http.Transport {
	tr := &http.Transport{MaxConnsPerHost: pageConns, MaxIdleConnsPerHost: pageConns, DisableCompression: true}
	switch i {
	case 0:
		tr.DialContext = e.st.DialContext
	case 1:
		tr.DialContext = (&proxy.Client{Proxy: e.paddr}).DialContext
	case 2:
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: e.paddr})
	}
	return tr
}

// fetchPage fetches every object over pageConns workers.
func fetchPage(c *http.Client, base string, sizes []int) error {
	next := make(chan int, len(sizes))
	for i := range sizes {
		next <- i
	}
	close(next)
	errc := make(chan error, pageConns)
	for range pageConns {
		go func() {
			for i := range next {
				resp, err := c.Get(base + strconv.Itoa(i))
				if err != nil {
					errc <- err
					return
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && n != int64(sizes[i]) {
					err = fmt.Errorf("object %d: %d bytes, want %d", i, n, sizes[i])
				}
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	var first error
	for range pageConns {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// pageRuns counts pageRun's calls: each run starts the rotation of the
// paths one further, so that no path is always first after a change.
var pageRuns int

// pageRun is one run of proxyTable: one stack, origin and proxy, a
// client per path of proxyPaths; each client's cold page, then rounds
// rounds of one warm page per path. The sample has, per path key, its
// cold page (ms), the median of its warm pages, their mean CPU; per
// proxied path, the median over the rounds of its page over the direct
// page of the same round (_ratio) and its CPU over direct's
// (_cpu_ratio).
func pageRun(carrier simnet.CarrierOptions, rounds int) (sample, error) {
	sizes := pageSizes()
	e, err := openPageEnv(sizes, carrier)
	if err != nil {
		return nil, err
	}
	n := len(proxyPaths)
	clients := make([]*http.Client, n)
	for i := range clients {
		clients[i] = &http.Client{Transport: e.client(i), Timeout: time.Minute}
	}
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	base := fmt.Sprintf("http://%s/obj/", net.JoinHostPort(simnet.TestAddr4.String(), strconv.Itoa(e.port)))
	first := pageRuns % n
	pageRuns++
	// page fetches one page over path i: its wall and CPU time (ms).
	page := func(i int) (wall, cpu float64, err error) {
		t0, cpu0 := time.Now(), processCPU()
		err = fetchPage(clients[i], base, sizes)
		return ms(time.Since(t0)), ms(processCPU() - cpu0), err
	}
	smp := sample{}
	for k := range n {
		i := (first + k) % n
		if !pathRuns(i) {
			continue
		}
		if smp[proxyPaths[i].key+"_cold"], _, err = page(i); err != nil {
			break
		}
	}
	warm := make([][]float64, n)
	cpu := make([]float64, n)
	for r := 0; r < rounds && err == nil; r++ {
		for k := range n {
			i := (first + r + k) % n
			if !pathRuns(i) {
				continue
			}
			var w, c float64
			if w, c, err = page(i); err != nil {
				break
			}
			warm[i], cpu[i] = append(warm[i], w), cpu[i]+c
		}
	}
	if cerr := e.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	for i, p := range proxyPaths {
		if !pathRuns(i) {
			continue
		}
		smp[p.key+"_warm"] = median(warm[i])
		smp[p.key+"_cpu"] = cpu[i] / float64(rounds)
		if i == 0 || !pathRuns(0) {
			continue
		}
		ratios := make([]float64, rounds)
		for r := range ratios {
			ratios[r] = warm[i][r] / warm[0][r]
		}
		smp[p.key+"_ratio"] = median(ratios)
		smp[p.key+"_cpu_ratio"] = cpu[i] / cpu[0]
	}
	return smp, nil
}

var abRate = regexp.MustCompile(`Requests per second:\s+([0-9.]+)`)

// forwarder carries each connection accepted on the host's loopback to
// one fixed target through the stack, byte for byte: the way a program
// that cannot call stack.Dial (ab) reaches the origin over the same
// path as the proxy, without the proxy's HTTP work. Serve owns the
// relays; close stops the listener and waits for them.
type forwarder struct {
	ln     net.Listener
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	target string
	done   chan struct{}
}

func newForwarder(dial func(ctx context.Context, network, addr string) (net.Conn, error), target string) (*forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &forwarder{ln: ln, dial: dial, target: target, done: make(chan struct{})}
	go f.serve()
	return f, nil
}

func (f *forwarder) addr() string { return f.ln.Addr().String() }

func (f *forwarder) serve() {
	defer close(f.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			t, err := f.dial(ctx, "tcp", f.target)
			if err != nil {
				return
			}
			defer t.Close()
			stop := context.AfterFunc(ctx, func() { c.Close(); t.Close() })
			defer stop()
			up := make(chan struct{})
			go func() {
				io.Copy(t, c)
				if cw, ok := t.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				}
				close(up)
			}()
			io.Copy(c, t)
			c.Close()
			<-up
		}()
	}
}

// close stops accepting and ends every relay (ab has finished with
// them; ab -k leaves its connections open until it exits).
func (f *forwarder) close() {
	f.ln.Close()
	<-f.done
}

// abRatio runs ApacheBench with keep-alive (HTTP/1.0 with Connection:
// Keep-Alive, 100 clients, a 16 KiB object), interleaved, c.runs times
// each: through the HTTP proxy on the emulated modem, and "direct" over
// the same stack path without the proxy (ab cannot call stack.Dial: a
// plain TCP forward carries each of its connections to the origin
// through the stack). ab straight to the origin on the host's loopback,
// which crosses neither the stack nor the emulated modem, is reported
// beside them for scale.
func (c *config) abRatio() (string, error) {
	if _, err := exec.LookPath("ab"); err != nil {
		return "", errors.New("ab is not installed (apt-get install apache2-utils)")
	}
	const obj = 16384
	e, err := openPageEnv([]int{obj}, simnet.CarrierOptions{})
	if err != nil {
		return "", err
	}
	defer e.close()
	origin := net.JoinHostPort(simnet.TestAddr4.String(), strconv.Itoa(e.port))
	fw, err := newForwarder(e.st.DialContext, origin)
	if err != nil {
		return "", err
	}
	defer fw.close()
	n := "20000"
	if c.quick {
		n = "2000"
	}
	requests, _ := strconv.Atoi(n)
	// run returns ab's rate and the bench process's CPU per request in
	// µs (ab's own is not counted: it is the same client either way).
	run := func(args ...string) (rate, cpu float64, err error) {
		cpu0 := processCPU()
		out, err := exec.Command("ab", append([]string{"-q", "-k", "-s", "30", "-n", n, "-c", "100"}, args...)...).CombinedOutput()
		if err != nil {
			return 0, 0, fmt.Errorf("ab %v: %v: %s", args, err, out)
		}
		cpu = float64((processCPU() - cpu0).Microseconds()) / float64(requests)
		m := abRate.FindSubmatch(out)
		if m == nil {
			return 0, 0, fmt.Errorf("ab %v: no rate in %s", args, out)
		}
		rate, err = strconv.ParseFloat(string(m[1]), 64)
		return rate, cpu, err
	}
	var loopback, direct, proxied, directCPU, proxiedCPU []float64
	for range c.runs {
		l, _, err := run(fmt.Sprintf("http://127.0.0.1:%d/obj/0", e.port))
		if err != nil {
			return "", err
		}
		d, dc, err := run(fmt.Sprintf("http://%s/obj/0", fw.addr()))
		if err != nil {
			return "", err
		}
		p, pc, err := run("-X", e.paddr, fmt.Sprintf("http://%s/obj/0", origin))
		if err != nil {
			return "", err
		}
		loopback, direct, proxied = append(loopback, l), append(direct, d), append(proxied, p)
		directCPU, proxiedCPU = append(directCPU, dc), append(proxiedCPU, pc)
	}
	st := e.srv.Stats()
	r := median(proxied) / median(direct)
	verdict := "meets"
	if r < 0.5 {
		verdict = "misses"
	}
	return fmt.Sprintf("ab -k -n %s -c 100, 16 KiB (median of %d runs each, interleaved): %.0f requests/s through the HTTP proxy "+
		"(ab → proxy → stack → emulated modem → carrier → origin; the proxy's pool: %d hits, %d misses), "+
		"%.0f direct (ab → a plain TCP forward into the stack → the same path; ab cannot call stack.Dial): %.2f× direct, %s the target of ≥ 0.5×. "+
		"CPU of the bench process per request: %.0f µs through the proxy, %.0f µs direct (%.2f×). "+
		"For scale, ab straight to the origin on the host's loopback (neither stack nor modem): %.0f requests/s.",
		n, len(direct), median(proxied), st.HTTPPoolHits, st.HTTPPoolMisses, median(direct), r, verdict,
		median(proxiedCPU), median(directCPU), median(proxiedCPU)/median(directCPU), median(loopback)), nil
}
