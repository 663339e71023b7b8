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
	"strconv"
	"sync"
	"time"

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
	// pagesWarm pages are fetched on the open connections after the
	// first: a page takes 15–30 ms, so the median of 3 swung with every
	// scheduling hiccup of a shared machine.
	pagesWarm = 10
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

// proxyPaths are the ways to the origin that proxyTable compares.
var proxyPaths = []string{"direct (stack.Dial)", "mhiproxy SOCKS5", "mhiproxy HTTP"}

// proxyTable fetches a page over the emulated modem directly through the
// stack and through the proxy that mhiproxy serves (package proxy on
// the same stack), and runs ab -k through the HTTP proxy.
func (c *config) proxyTable() (*table, error) {
	res, err := c.runAll(proxyPaths, func(i int) (sample, error) { return pageRun(i) })
	if err != nil {
		return nil, err
	}
	total := 0
	for _, s := range pageSizes() {
		total += s
	}
	t := &table{
		title: "11. Proxy: a page of 50 objects through mhiproxy against direct",
		intro: fmt.Sprintf("stack.Open on the emulated modem (qcom-sdx55m, no radio model); a net/http server on the host's "+
			"loopback (198.18.0.1 through the carrier) serves %d objects of 2–200 KB (fixed seeded sizes, %.1f MB in all). "+
			"A net/http client fetches them over %d keep-alive connections: directly through the stack (its DialContext), "+
			"through package proxy's server on that stack as mhiproxy runs it, by SOCKS5 (CONNECT per connection) and as an "+
			"HTTP proxy (absolute URIs, origin connections pooled). Cold: the first page, connections opened on the way; "+
			"warm: the median of %d more pages on the open connections. CPU: getrusage of the bench process (client, proxy, "+
			"stack, emulated modem, carrier and origin all run in it) over the warm pages, per page: it does not count the "+
			"time spent waiting for a core that other processes hold, so it is the cost a path adds on a loaded machine. "+
			"Median of the runs (range).",
			pageObjects, float64(total)/1e6, pageConns, pagesWarm),
		header: []string{"path", "cold page ms", "warm page ms", "warm / direct", "CPU ms per warm page", "CPU / direct"},
	}
	direct, directCPU := res[0].med("warm"), res[0].med("cpu")
	for i, n := range proxyPaths {
		t.rows = append(t.rows, []string{n, res[i].medRange("cold", 1), res[i].medRange("warm", 1),
			fmt.Sprintf("%.2f", res[i].med("warm")/direct), res[i].medRange("cpu", 1),
			fmt.Sprintf("%.2f", res[i].med("cpu")/directCPU)})
	}
	for i := 1; i < len(proxyPaths); i++ {
		r := res[i].med("warm") / direct
		verdict := "meets"
		if r > 1.2 {
			verdict = "misses"
		}
		t.notes = append(t.notes, fmt.Sprintf("%s: a warm page takes %.2f× direct; %s the target of ≤ 1.2×.", proxyPaths[i], r, verdict))
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

func openPageEnv(sizes []int) (*pageEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := mstack.Open(ctx, mstack.Options{Device: "sim"})
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

// client is a keep-alive HTTP client taking path i of proxyPaths.
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

// pageRun is one run of proxyTable for path i.
func pageRun(i int) (sample, error) {
	sizes := pageSizes()
	e, err := openPageEnv(sizes)
	if err != nil {
		return nil, err
	}
	tr := e.client(i)
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	base := fmt.Sprintf("http://%s/obj/", net.JoinHostPort(simnet.TestAddr4.String(), strconv.Itoa(e.port)))
	smp := sample{}
	t0 := time.Now()
	err = fetchPage(c, base, sizes)
	smp["cold"] = ms(time.Since(t0))
	var warm []float64
	cpu0 := processCPU()
	for range pagesWarm {
		if err != nil {
			break
		}
		t0 = time.Now()
		err = fetchPage(c, base, sizes)
		warm = append(warm, ms(time.Since(t0)))
	}
	smp["cpu"] = ms(processCPU()-cpu0) / pagesWarm
	tr.CloseIdleConnections()
	if cerr := e.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	smp["warm"] = median(warm)
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
	e, err := openPageEnv([]int{obj})
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
