package stack_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/mhistack/mhistack/link/simnet"
	"github.com/mhistack/mhistack/stack"
)

// Dial through the modem: Open brings up the emulated modem and its data
// session; simnet.TestAddr4 (198.18.0.1) on the carrier network is the
// host's 127.0.0.1, where a TCP server runs.
func Example() {
	ln, _ := net.Listen("tcp4", "127.0.0.1:0") // a server on the host
	defer ln.Close()
	go func() {
		c, _ := ln.Accept()
		c.Write([]byte("hello from the other side of the modem\n"))
		c.Close()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := stack.Open(ctx, stack.Options{}) // Device "sim"; a PCI address for a real modem
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	port := ln.Addr().(*net.TCPAddr).Port
	c, err := s.DialContext(ctx, "tcp", fmt.Sprintf("198.18.0.1:%d", port))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	b, _ := io.ReadAll(c)
	fmt.Print(string(b))
	// Output: hello from the other side of the modem
}

// An HTTP client whose connections and name lookups go through the modem.
func ExampleStack_HTTPClient() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "GET %s\n", r.URL.Path)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	s, err := stack.Open(context.Background(), stack.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	// simnet.TestName resolves, through the carrier's DNS, to the test
	// addresses that reach the host's loopback.
	resp, err := s.HTTPClient().Get(fmt.Sprintf("http://%s:%d/hello", simnet.TestName, port))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Print(string(b))
	// Output: GET /hello
}

// A listener on the modem's address, reached here from the same stack.
func ExampleStack_Listen() {
	s, err := stack.Open(context.Background(), stack.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ln, err := s.Listen("tcp", ":8080")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "welcome\n")
		c.Close()
	}()
	addr := s.Addresses()[0].Addr() // the address the session gave
	c, err := s.Dial("tcp", netip.AddrPortFrom(addr, 8080).String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	b, _ := io.ReadAll(c)
	fmt.Print(string(b))
	// Output: welcome
}

// Ping an address on the carrier network.
func ExampleStack_Ping() {
	s, err := stack.Open(context.Background(), stack.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Ping(ctx, simnet.TestAddr4); err != nil {
		log.Fatal(err)
	}
	fmt.Println("reply from", simnet.TestAddr4)
	// Output: reply from 198.18.0.1
}
