package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// SOCKS5 wire constants, RFC 1928 (sections in brackets) and RFC 1929.
const (
	socks5Version = 0x05 // [3] VER
	socks4Version = 0x04 // SOCKS4 clients are told no, not ignored

	methodNoAuth       = 0x00 // [3] NO AUTHENTICATION REQUIRED
	methodUserPass     = 0x02 // [3] USERNAME/PASSWORD (RFC 1929)
	methodNoAcceptable = 0xff // [3] NO ACCEPTABLE METHODS

	userPassVersion = 0x01 // RFC 1929 §2 sub-negotiation VER
	userPassOK      = 0x00 // RFC 1929 §2 STATUS success; any other value is failure
	userPassFailed  = 0x01

	cmdConnect      = 0x01 // [4] CMD
	cmdBind         = 0x02
	cmdUDPAssociate = 0x03

	atypIPv4   = 0x01 // [5] ATYP
	atypDomain = 0x03
	atypIPv6   = 0x04
)

// Reply is a SOCKS5 REP code, RFC 1928 §6.
type Reply byte

// REP values, RFC 1928 §6.
const (
	ReplySucceeded            Reply = 0x00
	ReplyGeneralFailure       Reply = 0x01
	ReplyNotAllowed           Reply = 0x02
	ReplyNetworkUnreachable   Reply = 0x03
	ReplyHostUnreachable      Reply = 0x04
	ReplyConnectionRefused    Reply = 0x05
	ReplyTTLExpired           Reply = 0x06
	ReplyCommandNotSupported  Reply = 0x07
	ReplyAddrTypeNotSupported Reply = 0x08
)

func (r Reply) String() string {
	switch r {
	case ReplySucceeded:
		return "succeeded"
	case ReplyGeneralFailure:
		return "general failure"
	case ReplyNotAllowed:
		return "not allowed by ruleset"
	case ReplyNetworkUnreachable:
		return "network unreachable"
	case ReplyHostUnreachable:
		return "host unreachable"
	case ReplyConnectionRefused:
		return "connection refused"
	case ReplyTTLExpired:
		return "TTL expired"
	case ReplyCommandNotSupported:
		return "command not supported"
	case ReplyAddrTypeNotSupported:
		return "address type not supported"
	}
	return "reply 0x" + strconv.FormatUint(uint64(r), 16)
}

// Addr is a SOCKS5 address: an IP address or a domain name (ATYP 3), and a
// port. Exactly one of IP and Name is set.
type Addr struct {
	IP   netip.Addr
	Name string
	Port uint16
}

// String formats a as host:port, as net.Dial takes it.
func (a Addr) String() string {
	if a.Name != "" {
		return a.Name + ":" + strconv.Itoa(int(a.Port))
	}
	return netip.AddrPortFrom(a.IP, a.Port).String()
}

// Request is a parsed SOCKS5 request, RFC 1928 §4.
type Request struct {
	Cmd  byte
	Addr Addr
}

// Parse errors. Each names the rule broken; the server turns them into the
// reply RFC 1928 §6 asks for and a log line.
var (
	errVersion      = errors.New("socks5: wrong version")
	errNoMethods    = errors.New("socks5: greeting lists no methods")
	errReserved     = errors.New("socks5: reserved byte not zero")
	errAddrType     = errors.New("socks5: unknown address type")
	errEmptyName    = errors.New("socks5: empty domain name")
	errBadName      = errors.New("socks5: domain name has a NUL, space or control byte")
	errFragment     = errors.New("socks5: fragmented UDP datagram (FRAG != 0) not supported")
	errShort        = errors.New("socks5: datagram shorter than its header")
	errUserPassVers = errors.New("socks5: wrong username/password sub-negotiation version")
)

// readGreeting reads the client's version/method-selection message,
// RFC 1928 §3: VER NMETHODS METHODS[NMETHODS]. buf must hold 257 bytes.
func readGreeting(r io.Reader, buf []byte) (methods []byte, err error) {
	if _, err := io.ReadFull(r, buf[:2]); err != nil {
		return nil, err
	}
	if buf[0] != socks5Version {
		return nil, fmt.Errorf("%w: greeting VER %#x", errVersion, buf[0])
	}
	n := int(buf[1])
	if n == 0 {
		return nil, errNoMethods
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// readUserPass reads the RFC 1929 §2 request: VER ULEN UNAME PLEN PASSWD.
// buf must hold 255 bytes.
func readUserPass(r io.Reader, buf []byte) (user, pass string, err error) {
	if _, err := io.ReadFull(r, buf[:2]); err != nil {
		return "", "", err
	}
	if buf[0] != userPassVersion {
		return "", "", fmt.Errorf("%w: %#x", errUserPassVers, buf[0])
	}
	ulen := int(buf[1])
	if _, err := io.ReadFull(r, buf[:ulen]); err != nil {
		return "", "", err
	}
	user = string(buf[:ulen])
	if _, err := io.ReadFull(r, buf[:1]); err != nil {
		return "", "", err
	}
	plen := int(buf[0])
	if _, err := io.ReadFull(r, buf[:plen]); err != nil {
		return "", "", err
	}
	return user, string(buf[:plen]), nil
}

// readRequest reads a request, RFC 1928 §4: VER CMD RSV ATYP DST.ADDR
// DST.PORT. buf must hold 255 bytes. The command is not judged here: an
// unsupported one is a well-formed request that gets REP 7.
func readRequest(r io.Reader, buf []byte) (Request, error) {
	if _, err := io.ReadFull(r, buf[:3]); err != nil {
		return Request{}, err
	}
	if buf[0] != socks5Version {
		return Request{}, fmt.Errorf("%w: request VER %#x", errVersion, buf[0])
	}
	if buf[2] != 0 {
		return Request{}, errReserved
	}
	req := Request{Cmd: buf[1]}
	a, err := readAddr(r, buf)
	if err != nil {
		return Request{}, err
	}
	req.Addr = a
	return req, nil
}

// readAddr reads ATYP DST.ADDR DST.PORT, RFC 1928 §5.
func readAddr(r io.Reader, buf []byte) (Addr, error) {
	if _, err := io.ReadFull(r, buf[:1]); err != nil {
		return Addr{}, err
	}
	var a Addr
	switch buf[0] {
	case atypIPv4:
		if _, err := io.ReadFull(r, buf[:4+2]); err != nil {
			return Addr{}, err
		}
		a.IP = netip.AddrFrom4([4]byte(buf[:4]))
		a.Port = binary.BigEndian.Uint16(buf[4:])
	case atypIPv6:
		if _, err := io.ReadFull(r, buf[:16+2]); err != nil {
			return Addr{}, err
		}
		a.IP = netip.AddrFrom16([16]byte(buf[:16]))
		a.Port = binary.BigEndian.Uint16(buf[16:])
	case atypDomain:
		if _, err := io.ReadFull(r, buf[:1]); err != nil {
			return Addr{}, err
		}
		n := int(buf[0])
		if _, err := io.ReadFull(r, buf[:n+2]); err != nil {
			return Addr{}, err
		}
		name, err := checkName(buf[:n])
		if err != nil {
			return Addr{}, err
		}
		a.Name = name
		a.Port = binary.BigEndian.Uint16(buf[n:])
	default:
		return Addr{}, fmt.Errorf("%w %#x", errAddrType, buf[0])
	}
	return a, nil
}

// checkName validates a DOMAINNAME and, when it is an IP literal (some
// clients send "127.0.0.1" as a name), returns it unchanged: the caller
// parses literals before asking a resolver.
func checkName(b []byte) (string, error) {
	if len(b) == 0 {
		return "", errEmptyName
	}
	for _, c := range b {
		// Names go to a DNS resolver and into log lines; bytes that no
		// host name has would only be a way to confuse either.
		if c <= ' ' || c == 0x7f {
			return "", errBadName
		}
	}
	return string(b), nil
}

// appendAddr appends ATYP ADDR PORT for a, RFC 1928 §5. A name longer than
// 255 bytes cannot be encoded and is the caller's bug.
func appendAddr(b []byte, a Addr) []byte {
	switch {
	case a.Name != "":
		b = append(b, atypDomain, byte(len(a.Name)))
		b = append(b, a.Name...)
	case a.IP.Is4(): // a mapped address stays ATYP 4: callers unmap first
		ip := a.IP.As4()
		b = append(b, atypIPv4)
		b = append(b, ip[:]...)
	case a.IP.Is6():
		ip := a.IP.As16()
		b = append(b, atypIPv6)
		b = append(b, ip[:]...)
	default: // no address: 0.0.0.0, as replies with nothing to report use
		b = append(b, atypIPv4, 0, 0, 0, 0)
	}
	return binary.BigEndian.AppendUint16(b, a.Port)
}

// appendReply appends a reply, RFC 1928 §6: VER REP RSV ATYP BND.ADDR
// BND.PORT.
func appendReply(b []byte, rep Reply, bnd Addr) []byte {
	b = append(b, socks5Version, byte(rep), 0)
	return appendAddr(b, bnd)
}

// udpHeaderMax is the longest UDP request header, RFC 1928 §7: RSV(2)
// FRAG(1) ATYP(1) a 255-byte name with its length byte, and a port.
const udpHeaderMax = 2 + 1 + 1 + 1 + 255 + 2

// ParseUDPHeader splits a datagram from a SOCKS5 client, RFC 1928 §7:
// RSV(2) FRAG(1) ATYP DST.ADDR DST.PORT DATA. It returns the destination
// and the payload (aliasing b). Fragments are refused, as most servers do:
// the RFC makes reassembly optional and no client in use sends them.
func ParseUDPHeader(b []byte) (Addr, []byte, error) {
	if len(b) < 4 {
		return Addr{}, nil, errShort
	}
	if b[0] != 0 || b[1] != 0 {
		return Addr{}, nil, errReserved
	}
	if b[2] != 0 {
		return Addr{}, nil, errFragment
	}
	var a Addr
	rest := b[4:]
	switch b[3] {
	case atypIPv4:
		if len(rest) < 4+2 {
			return Addr{}, nil, errShort
		}
		a.IP = netip.AddrFrom4([4]byte(rest[:4]))
		rest = rest[4:]
	case atypIPv6:
		if len(rest) < 16+2 {
			return Addr{}, nil, errShort
		}
		a.IP = netip.AddrFrom16([16]byte(rest[:16]))
		rest = rest[16:]
	case atypDomain:
		if len(rest) < 1 {
			return Addr{}, nil, errShort
		}
		n := int(rest[0])
		if len(rest) < 1+n+2 {
			return Addr{}, nil, errShort
		}
		name, err := checkName(rest[1 : 1+n])
		if err != nil {
			return Addr{}, nil, err
		}
		a.Name = name
		rest = rest[1+n:]
	default:
		return Addr{}, nil, fmt.Errorf("%w %#x", errAddrType, b[3])
	}
	a.Port = binary.BigEndian.Uint16(rest)
	return a, rest[2:], nil
}

// AppendUDPHeader appends the RFC 1928 §7 header for a datagram from or
// to a (FRAG 0).
func AppendUDPHeader(b []byte, a Addr) []byte {
	b = append(b, 0, 0, 0)
	return appendAddr(b, a)
}
