package sahara

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Transport carries whole messages, one transfer each, as an MHI channel
// pair does (mhi/pairconn.Conn).
type Transport interface {
	Send(ctx context.Context, b []byte) error
	Recv(ctx context.Context) ([]byte, error)
}

// Defaults of Host.
const (
	DefaultTimeout   = 5 * time.Second
	DefaultMaxRead   = 1 << 20 // largest READ_DATA served; qaic's devices ask ≤ 0x80000
	DefaultReadChunk = 0xFFF0  // MEMORY_READ size, as qaic
	DefaultMaxDump   = 1 << 30
	// maxCommands bounds one session: 256 MiB of images in 4 KiB
	// reads (targets read 64 KiB to 512 KiB at a time).
	maxCommands = 1 << 16
)

// Errors of Host.Run, beside the transport's and Decode's.
var (
	// ErrUnexpected: the target sent a command that has no place at
	// this point of the protocol.
	ErrUnexpected = errors.New("sahara: unexpected command")
	// ErrUnknownImage: READ_DATA for an image the host was not given.
	ErrUnknownImage = errors.New("sahara: target asked for an unknown image")
	// ErrBadRange: READ_DATA, MEMORY_DEBUG or the table named bytes
	// outside what exists or above the host's bounds.
	ErrBadRange = errors.New("sahara: requested range out of bounds")
	// ErrImageFailed: END_OF_IMAGE with a non-zero status.
	ErrImageFailed = errors.New("sahara: target reported the image transfer failed")
	// ErrNoDump: the target is in memory debug mode and Host.OnRegion
	// is nil.
	ErrNoDump = errors.New("sahara: target offers a memory dump and no OnRegion is set")
)

// Host is the host's side of Sahara: it answers the target's HELLO,
// serves the images the target reads, and collects a memory dump when the
// target offers one.
//
//	h := &sahara.Host{Images: map[uint32]string{13: "prog_firehose.elf"}}
//	res, err := h.Run(ctx, conn)
type Host struct {
	// Images maps image ids to files. qdl sends the EDL programmer as
	// image 13.
	Images map[uint32]string
	// OnRegion receives each memory region of a dump, in table order;
	// its error ends the dump. Nil: a memory debug HELLO is refused
	// with RESET.
	OnRegion func(r Region, data []byte) error
	// OnProgress, when set, is told of each READ_DATA served.
	OnProgress func(image uint32, offset, length uint64)
	// Timeout bounds each wait for the target (default DefaultTimeout).
	Timeout time.Duration
	// MaxRead bounds one READ_DATA (default DefaultMaxRead); ReadChunk
	// is the size of MEMORY_READ requests (default DefaultReadChunk);
	// MaxDump bounds a whole dump (default DefaultMaxDump).
	MaxRead, ReadChunk, MaxDump uint64
}

// Result says what a Run did.
type Result struct {
	Served  map[uint32]uint64 // bytes sent per image id
	Regions int               // memory regions passed to OnRegion
	Mode    Mode              // the HELLO's mode
}

// Run talks Sahara to the target on t until the image transfer is
// complete (DONE_RESP with status complete) or the dump is collected
// (RESET_RESP). A protocol error is answered with RESET and returned.
func (h *Host) Run(ctx context.Context, t Transport) (Result, error) {
	s := &session{h: h, t: t, files: map[uint32]*os.File{}, sizes: map[uint32]int64{}, res: Result{Served: map[uint32]uint64{}}}
	defer s.closeFiles()
	err := s.run(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		// Best effort: a target stuck on our mistake starts over.
		if p, e := Append(nil, Packet{Cmd: CmdReset}); e == nil {
			sctx, cancel := context.WithTimeout(context.Background(), s.timeout())
			_ = t.Send(sctx, p)
			cancel()
		}
	}
	return s.res, err
}

type session struct {
	h     *Host
	t     Transport
	files map[uint32]*os.File
	sizes map[uint32]int64
	res   Result
}

func (s *session) timeout() time.Duration {
	if s.h.Timeout > 0 {
		return s.h.Timeout
	}
	return DefaultTimeout
}

func orDefault(v, d uint64) uint64 {
	if v == 0 {
		return d
	}
	return v
}

func (s *session) recv(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	return s.t.Recv(ctx)
}

func (s *session) send(ctx context.Context, b []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	return s.t.Send(ctx, b)
}

func (s *session) sendPacket(ctx context.Context, p Packet) error {
	b, err := Append(nil, p)
	if err != nil {
		return err
	}
	return s.send(ctx, b)
}

func (s *session) recvPacket(ctx context.Context) (Packet, error) {
	b, err := s.recv(ctx)
	if err != nil {
		return Packet{}, err
	}
	return Decode(b)
}

func (s *session) run(ctx context.Context) error {
	p, err := s.recvPacket(ctx)
	if err != nil {
		return fmt.Errorf("sahara: waiting for HELLO: %w", err)
	}
	// The number of packets a session may take is bounded by the
	// images' sizes; this bounds a target that loops on HELLO.
	for hellos := 0; ; hellos++ {
		if p.Cmd != CmdHello {
			return fmt.Errorf("%w: %v before HELLO", ErrUnexpected, p.Cmd)
		}
		if hellos > 64 {
			return fmt.Errorf("%w: more than 64 HELLOs", ErrUnexpected)
		}
		s.res.Mode = p.Mode
		switch p.Mode {
		case ModeImageTxPending, ModeImageTxComplete:
		case ModeMemoryDebug:
			if s.h.OnRegion == nil {
				return ErrNoDump
			}
		default:
			return fmt.Errorf("%w: HELLO mode %d", ErrUnexpected, p.Mode)
		}
		if err := s.sendPacket(ctx, Packet{Cmd: CmdHelloResp, Version: Version, Compatible: VersionCompatible, Status: StatusSuccess, Mode: p.Mode}); err != nil {
			return err
		}
		next, err := s.serve(ctx)
		if err != nil || next == nil {
			return err
		}
		p = *next
	}
}

// serve handles the target's commands after HELLO_RESP. It returns a
// HELLO that restarts the session, or nil when the session is over.
func (s *session) serve(ctx context.Context) (*Packet, error) {
	for n := 0; ; n++ {
		if n == maxCommands {
			return nil, fmt.Errorf("%w: more than %d commands in one session", ErrUnexpected, maxCommands)
		}
		p, err := s.recvPacket(ctx)
		if err != nil {
			return nil, err
		}
		switch p.Cmd {
		case CmdHello:
			return &p, nil
		case CmdReadData, CmdReadData64:
			if err := s.readData(ctx, p); err != nil {
				return nil, err
			}
		case CmdEndOfImage:
			if p.Status != StatusSuccess {
				return nil, fmt.Errorf("%w: image %d, status %#x", ErrImageFailed, p.Image, p.Status)
			}
			if err := s.sendPacket(ctx, Packet{Cmd: CmdDone}); err != nil {
				return nil, err
			}
			r, err := s.recvPacket(ctx)
			if err != nil {
				return nil, fmt.Errorf("sahara: waiting for DONE_RESP: %w", err)
			}
			if r.Cmd != CmdDoneResp {
				return nil, fmt.Errorf("%w: %v after DONE", ErrUnexpected, r.Cmd)
			}
			if r.Status == DoneComplete {
				return nil, nil
			}
		case CmdMemoryDebug, CmdMemoryDebug64:
			if s.res.Mode != ModeMemoryDebug {
				return nil, fmt.Errorf("%w: %v in mode %d", ErrUnexpected, p.Cmd, s.res.Mode)
			}
			return nil, s.dump(ctx, p)
		default:
			return nil, fmt.Errorf("%w: %v", ErrUnexpected, p.Cmd)
		}
	}
}

func (s *session) image(id uint64) (*os.File, int64, error) {
	if id > 0xFFFFFFFF {
		return nil, 0, fmt.Errorf("%w: id %#x", ErrUnknownImage, id)
	}
	if f, ok := s.files[uint32(id)]; ok {
		return f, s.sizes[uint32(id)], nil
	}
	name, known := s.h.Images[uint32(id)]
	if !known {
		return nil, 0, fmt.Errorf("%w: id %d", ErrUnknownImage, id)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, fmt.Errorf("sahara: image %d: %w", id, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	s.files[uint32(id)], s.sizes[uint32(id)] = f, st.Size()
	return f, st.Size(), nil
}

func (s *session) readData(ctx context.Context, p Packet) error {
	f, size, err := s.image(p.Image)
	if err != nil {
		return err
	}
	maxRead := orDefault(s.h.MaxRead, DefaultMaxRead)
	if p.Length == 0 || p.Length > maxRead || p.Offset > uint64(size) || p.Length > uint64(size)-p.Offset {
		return fmt.Errorf("%w: image %d (%d bytes): offset %d length %d (at most %d per read)", ErrBadRange, p.Image, size, p.Offset, p.Length, maxRead)
	}
	buf := make([]byte, p.Length)
	if _, err := f.ReadAt(buf, int64(p.Offset)); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("sahara: image %d: %w", p.Image, err)
	}
	if err := s.send(ctx, buf); err != nil {
		return err
	}
	s.res.Served[uint32(p.Image)] += p.Length
	if s.h.OnProgress != nil {
		s.h.OnProgress(uint32(p.Image), p.Offset, p.Length)
	}
	return nil
}

// readRaw reads exactly n raw bytes the target sends after a MEMORY_READ.
// A 16-byte transfer that decodes as END_OF_IMAGE is the target's refusal
// (requests are never exactly 16 bytes long, see chunks).
func (s *session) readRaw(ctx context.Context, n uint64) ([]byte, error) {
	out := make([]byte, 0, n)
	for uint64(len(out)) < n {
		b, err := s.recv(ctx)
		if err != nil {
			return nil, err
		}
		if len(out) == 0 && len(b) == lengths[CmdEndOfImage] && n != 16 {
			if p, err := Decode(b); err == nil && p.Cmd == CmdEndOfImage {
				return nil, fmt.Errorf("%w: memory read refused, status %#x", ErrImageFailed, p.Status)
			}
		}
		if uint64(len(out)+len(b)) > n {
			return nil, fmt.Errorf("%w: target sent %d bytes for a %d-byte read", ErrBadRange, len(out)+len(b), n)
		}
		out = append(out, b...)
	}
	return out, nil
}

func (s *session) memoryRead(ctx context.Context, wide bool, addr, n uint64) ([]byte, error) {
	cmd := CmdMemoryRead
	if wide {
		cmd = CmdMemoryRead64
	}
	if err := s.sendPacket(ctx, Packet{Cmd: cmd, Offset: addr, Length: n}); err != nil {
		return nil, err
	}
	return s.readRaw(ctx, n)
}

// chunks splits a read of n bytes into requests of at most chunk bytes,
// none exactly 16 bytes long.
func chunks(n, chunk uint64) []uint64 {
	var out []uint64
	for n > 0 {
		c := min(n, chunk)
		if c == 16 {
			c = 8
		}
		out = append(out, c)
		n -= c
	}
	return out
}

func (s *session) dump(ctx context.Context, p Packet) error {
	wide := p.Cmd == CmdMemoryDebug64
	size := uint64(EntrySize32)
	if wide {
		size = EntrySize64
	}
	if p.Length == 0 || p.Length > MaxTableSize || p.Length%size != 0 {
		return fmt.Errorf("%w: debug table of %d bytes", ErrBadRange, p.Length)
	}
	tb, err := s.memoryRead(ctx, wide, p.Offset, p.Length)
	if err != nil {
		return fmt.Errorf("sahara: reading the debug table: %w", err)
	}
	regions, err := DecodeTable(tb, wide)
	if err != nil {
		return err
	}
	maxDump, chunk := orDefault(s.h.MaxDump, DefaultMaxDump), orDefault(s.h.ReadChunk, DefaultReadChunk)
	var total uint64
	for _, r := range regions {
		if r.Length > maxDump-total || (!wide && r.Address+r.Length > 1<<32) || r.Address+r.Length < r.Address {
			return fmt.Errorf("%w: region %q at %#x, %d bytes (dump bound %d)", ErrBadRange, r.Description, r.Address, r.Length, maxDump)
		}
		total += r.Length
		data := make([]byte, 0, r.Length)
		addr := r.Address
		for _, c := range chunks(r.Length, chunk) {
			b, err := s.memoryRead(ctx, wide, addr, c)
			if err != nil {
				return fmt.Errorf("sahara: region %q: %w", r.Description, err)
			}
			data = append(data, b...)
			addr += c
		}
		if err := s.h.OnRegion(r, data); err != nil {
			return err
		}
		s.res.Regions++
	}
	if err := s.sendPacket(ctx, Packet{Cmd: CmdReset}); err != nil {
		return err
	}
	r, err := s.recvPacket(ctx)
	if err != nil {
		return fmt.Errorf("sahara: waiting for RESET_RESP: %w", err)
	}
	if r.Cmd != CmdResetResp {
		return fmt.Errorf("%w: %v after RESET", ErrUnexpected, r.Cmd)
	}
	return nil
}

func (s *session) closeFiles() {
	for _, f := range s.files {
		f.Close()
	}
}
