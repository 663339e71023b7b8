package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"
)

// serveSOCKS runs one SOCKS5 session on c: method selection, optional
// RFC 1929 authentication, the request, then the command. br holds what
// was read from c so far; release gives it back once no longer needed.
func (s *Server) serveSOCKS(c net.Conn, br *bufio.Reader, lr *headerLimit, release func()) {
	var buf [257]byte
	methods, err := readGreeting(br, buf[:])
	if err != nil {
		if errors.Is(err, errNoMethods) {
			c.Write([]byte{socks5Version, methodNoAcceptable})
			s.badRequest(c, "socks5 greeting", err)
			return
		}
		s.handshakeError(c, "socks5 greeting", err)
		return
	}
	method := s.chooseMethod(methods)
	if method == methodNoAcceptable {
		s.stats.AuthFailures.Add(1) // counted before the client can see the answer
	}
	if _, err := c.Write([]byte{socks5Version, method}); err != nil {
		return
	}
	switch method {
	case methodNoAcceptable:
		s.logger().Info("proxy: socks5 client offers no acceptable method", "client", c.RemoteAddr(), "methods", methods, "auth_required", s.Credentials != nil)
		return
	case methodUserPass:
		user, pass, err := readUserPass(br, buf[:])
		if err != nil {
			if errors.Is(err, errUserPassVers) {
				c.Write([]byte{userPassVersion, userPassFailed})
				s.badRequest(c, "socks5 auth", err)
				return
			}
			s.handshakeError(c, "socks5 auth", err)
			return
		}
		if s.Credentials != nil && !s.Credentials(user, pass) {
			s.stats.AuthFailures.Add(1)
			c.Write([]byte{userPassVersion, userPassFailed})
			s.logger().Info("proxy: socks5 authentication failed", "client", c.RemoteAddr(), "user", user)
			return
		}
		if _, err := c.Write([]byte{userPassVersion, userPassOK}); err != nil {
			return
		}
	}

	req, err := readRequest(br, buf[:])
	if err != nil {
		switch {
		case errors.Is(err, errAddrType):
			s.reply(c, ReplyAddrTypeNotSupported, Addr{})
			s.badRequest(c, "socks5 request", err)
		case errors.Is(err, errVersion), errors.Is(err, errReserved), errors.Is(err, errEmptyName), errors.Is(err, errBadName):
			s.reply(c, ReplyGeneralFailure, Addr{})
			s.badRequest(c, "socks5 request", err)
		default:
			s.handshakeError(c, "socks5 request", err)
		}
		return
	}
	lr.off()
	c.SetDeadline(time.Time{})

	switch req.Cmd {
	case cmdConnect:
		s.socksConnect(c, br, release, req)
	case cmdUDPAssociate:
		s.socksAssociate(c, release, req)
	default:
		s.reply(c, ReplyCommandNotSupported, Addr{})
		what := "socks5 command"
		if req.Cmd == cmdBind {
			what = "socks5 BIND"
		}
		s.badRequest(c, what, errors.New("command not supported"))
	}
}

// chooseMethod picks the authentication method, RFC 1928 §3. With
// Credentials set only username/password will do. Without, no
// authentication is preferred, but a client that offers only
// username/password (some are configured that way) is let in with any.
func (s *Server) chooseMethod(methods []byte) byte {
	var noAuth, userPass bool
	for _, m := range methods {
		switch m {
		case methodNoAuth:
			noAuth = true
		case methodUserPass:
			userPass = true
		}
	}
	switch {
	case s.Credentials != nil && userPass:
		return methodUserPass
	case s.Credentials != nil:
		return methodNoAcceptable
	case noAuth:
		return methodNoAuth
	case userPass:
		return methodUserPass
	}
	return methodNoAcceptable
}

// reply writes a SOCKS5 reply.
func (s *Server) reply(c net.Conn, rep Reply, bnd Addr) error {
	var b [4 + 16 + 2]byte
	_, err := c.Write(appendReply(b[:0], rep, bnd))
	return err
}

// socksConnect dials the target and relays, RFC 1928 §4 CONNECT.
func (s *Server) socksConnect(c net.Conn, br *bufio.Reader, release func(), req Request) {
	target, err := s.dial(s.context(), req.Addr)
	if err != nil {
		rep := replyFor(err)
		s.stats.DialErrors.Add(1)
		s.logger().Info("proxy: socks5 connect failed", "client", c.RemoteAddr(), "target", req.Addr.String(), "reply", rep.String(), "err", err)
		s.reply(c, rep, Addr{})
		return
	}
	if err := s.reply(c, ReplySucceeded, addrOf(target.LocalAddr())); err != nil {
		target.Close()
		return
	}
	s.stats.SOCKSConnects.Add(1)
	pre := drain(br)
	release()
	s.relay(c, target, pre)
}

// drain returns a copy of what br has buffered beyond the request: data a
// client sent without waiting for the reply.
func drain(br *bufio.Reader) []byte {
	n := br.Buffered()
	if n == 0 {
		return nil
	}
	b, _ := br.Peek(n)
	return append([]byte(nil), b...)
}

// addrOf converts a net.Addr for BND.ADDR; anything but an IP address
// reports 0.0.0.0:0, which RFC 1928 clients accept.
func addrOf(a net.Addr) Addr {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		if a != nil {
			ap, _ = netip.ParseAddrPort(a.String())
		}
	}
	return Addr{IP: ap.Addr().Unmap(), Port: ap.Port()}
}

// replyFor maps a resolve or dial error to a REP code, RFC 1928 §6, so
// that clients print the real reason.
func replyFor(err error) Reply {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReplyConnectionRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return ReplyNetworkUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH), errors.As(err, &dnsErr), errors.Is(err, errNoResolver):
		return ReplyHostUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return ReplyHostUnreachable
	}
	// gVisor's adapters report tcpip errors as text, not errno; the stack
	// package maps them, but a plain gonet dialer may still be in use.
	switch msg := err.Error(); {
	case strings.Contains(msg, "connection refused"):
		return ReplyConnectionRefused
	case strings.Contains(msg, "network is unreachable"):
		return ReplyNetworkUnreachable
	case strings.Contains(msg, "no route to host"), strings.Contains(msg, "host is unreachable"):
		return ReplyHostUnreachable
	}
	return ReplyGeneralFailure
}

// waitClosed reads c until EOF or an error, discarding: a SOCKS5 control
// connection carries nothing after an UDP ASSOCIATE reply, and its end is
// the association's end (RFC 1928 §7).
func waitClosed(c io.Reader) {
	var b [64]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			return
		}
	}
}
