// Package stack is the modem as a Go network: a gVisor TCP/IP stack over
// the modem's link endpoint with an API shaped like package net (Dial,
// Listen, ListenPacket, Ping, a resolver that only asks the modem's DNS,
// an HTTP client), configured from the data session and following it.
//
// The first calls:
//
//	s, err := stack.Open(ctx, stack.Options{APN: "internet"}) // "sim", or a PCI address
//	defer s.Close()
//	c, err := s.DialContext(ctx, "tcp", "example.com:443")
//
// stack.New builds the same stack over any gVisor link endpoint.
//
// Goroutines: the stack starts none per connection (gVisor's TCP
// processors and the link endpoint's poller do the work); Close stops
// every goroutine of the stack and of what Open set up below it.
//
// Errors are package net's: *net.OpError wrapping syscall.Errno values
// where package net's would (ECONNREFUSED, ETIMEDOUT, ENETUNREACH,
// ECONNRESET, EINVAL for a wrong address type), net.ErrClosed after
// Close (of the socket or of the Stack), os.ErrDeadlineExceeded past a
// deadline; a failed call returns a nil interface. docs/STACK.md lists
// where the API still differs from package net.
package stack
