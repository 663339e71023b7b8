// Command proxye2e is hack/e2e.sh's helper: the pieces of the end-to-end
// proxy test that Debian's clients do not provide.
//
//	proxye2e www -dir D          serve D over HTTP on 127.0.0.1 (prints "http 127.0.0.1:PORT")
//	proxye2e udpecho             answer UDP datagrams with "echo:"+payload on 127.0.0.1 and ::1,
//	                             one port (prints "udp 127.0.0.1:PORT")
//	proxye2e udp -proxy A -to T  UDP ASSOCIATE through the SOCKS5 proxy A, send datagrams to T
//	                             (IP:port or name:port) and check each echo
//	proxye2e hostproxy           the proxy package over the host's network, loopback only, for
//	                             developing e2e.sh before mhiproxy runs on the emulated modem;
//	                             the name test.mhistack resolves to 127.0.0.1 as the carrier's
//	                             DNS resolves it to 198.18.0.1
//
// The servers run until SIGTERM or SIGINT and exit 0.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mhistack/mhistack/stack/proxy"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: proxye2e www|udpecho|udp|hostproxy [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "www":
		err = www(ctx, args)
	case "udpecho":
		err = udpEcho(ctx)
	case "udp":
		err = udpClient(args)
	case "hostproxy":
		err = hostProxy(ctx, args)
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxye2e:", err)
		os.Exit(1)
	}
}

func www(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("www", flag.ExitOnError)
	dir := fs.String("dir", ".", "directory to serve")
	fs.Parse(args)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(*dir)), ReadHeaderTimeout: 10 * time.Second}
	fmt.Println("http", ln.Addr())
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

func udpEcho(ctx context.Context) error {
	// The same port on 127.0.0.1 and ::1: the carrier's DNS answers
	// test.mhistack with 198.18.0.1 and 2001:2::1 (the host's two
	// loopbacks), the proxy sends a UDP datagram for a name to the first
	// address (IPv6 first, RFC 6724), and UDP has no refusal to fall
	// back on as TCP's happy eyeballs does.
	var pcs []net.PacketConn
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		pc6, err := net.ListenPacket("udp6", fmt.Sprintf("[::1]:%d", pc.LocalAddr().(*net.UDPAddr).Port))
		if err == nil {
			pcs = []net.PacketConn{pc, pc6}
			break
		}
		if try == 20 {
			// No IPv6 loopback: names reach only the IPv4 echo.
			fmt.Fprintln(os.Stderr, "proxye2e: udpecho on 127.0.0.1 only:", err)
			pcs = []net.PacketConn{pc}
			break
		}
		pc.Close()
	}
	fmt.Println("udp", pcs[0].LocalAddr())
	errc := make(chan error, len(pcs))
	for _, pc := range pcs {
		go func() { <-ctx.Done(); pc.Close() }()
		go func() {
			buf := make([]byte, 65536)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					errc <- nil
					return
				}
				pc.WriteTo(append([]byte("echo:"), buf[:n]...), from)
			}
		}()
	}
	for range pcs {
		<-errc
	}
	return nil
}

func udpClient(args []string) error {
	fs := flag.NewFlagSet("udp", flag.ExitOnError)
	proxyAddr := fs.String("proxy", "127.0.0.1:1080", "SOCKS5 proxy")
	to := fs.String("to", "", "destination host:port (an echo server)")
	n := fs.Int("n", 20, "datagrams to send")
	user := fs.String("user", "", "RFC 1929 user")
	pass := fs.String("password", "", "RFC 1929 password")
	fs.Parse(args)
	dst, err := proxy.ParseAddr(*to)
	if err != nil {
		return fmt.Errorf("-to: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := (&proxy.Client{Proxy: *proxyAddr, User: *user, Password: *pass}).ListenUDP(ctx)
	if err != nil {
		return fmt.Errorf("UDP ASSOCIATE: %w", err)
	}
	defer u.Close()
	buf := make([]byte, 2048)
	got := 0
	for i := range *n {
		msg := fmt.Appendf(nil, "datagram %d %s", i, bytes.Repeat([]byte{'d'}, i*50))
		if _, err := u.WriteToAddr(msg, dst); err != nil {
			return err
		}
		// UDP may drop; a lost datagram is retried once before failing.
		for try := 0; try < 2; try++ {
			u.SetReadDeadline(time.Now().Add(2 * time.Second))
			m, _, err := u.ReadFrom(buf)
			if err == nil && bytes.Equal(buf[:m], append([]byte("echo:"), msg...)) {
				got++
				break
			}
			if err == nil {
				continue // a late echo of an earlier datagram
			}
			u.WriteToAddr(msg, dst)
		}
	}
	fmt.Printf("udp: %d/%d datagrams echoed through %s to %s\n", got, *n, *proxyAddr, *to)
	if got != *n {
		return fmt.Errorf("%d of %d datagrams lost", *n-got, *n)
	}
	return nil
}

// hostResolver resolves test.mhistack only, as the emulated carrier does.
type hostResolver struct{}

func (hostResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if host == "test.mhistack" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func hostProxy(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hostproxy", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "proxy address (loopback only)")
	fs.Parse(args)
	host, _, err := net.SplitHostPort(*listen)
	if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen %q: a loopback IP:port only", *listen)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &proxy.Server{
		Dialer:         &net.Dialer{},
		Resolver:       hostResolver{},
		PacketListener: &net.ListenConfig{},
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	fmt.Printf("listening on %s via host/loopback, ip 127.0.0.1\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		srv.Close()
		return nil
	case err := <-errc:
		return err
	}
}
