package sim

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/mhistack/mhistack/mhi/sahara"
)

// Sahara is the SBL's Sahara server on the SAHARA channel pair (EE SBL):
// at Start it sends HELLO and then asks the host for each of Images in
// order, in READ_DATA requests of Chunk bytes, ending each with
// END_OF_IMAGE and DONE; or, with Dump set, it offers its RAM as a memory
// dump (MEMORY_DEBUG) and serves MEMORY_READ until the host's RESET.
// It checks every host packet as strictly as a boot loader would and
// records the first protocol error (Err); what it received is Received.
// A host error ends the session: the server answers nothing more until
// the pair restarts.
type Sahara struct {
	// Images are asked for in order: id and size.
	Images []SaharaImage
	// Chunk is the READ_DATA length (default 0x10000); Wide uses
	// READ_DATA64 and MEMORY_DEBUG64.
	Chunk int
	Wide  bool
	// Dump, when not nil, makes the HELLO offer memory debug mode with
	// these regions; the debug table sits at TableAddress.
	Dump         []SaharaRegion
	TableAddress uint64

	mu       sync.Mutex
	port     *Port
	state    saharaState
	img, off int
	want     uint64 // raw bytes the host owes for the current READ_DATA
	received map[uint32][]byte
	err      error
	done     bool
	table    []byte
}

// SaharaImage is one image the emulated SBL loads.
type SaharaImage struct {
	ID   uint32
	Size int
}

// SaharaRegion is one memory region of an emulated dump.
type SaharaRegion struct {
	sahara.Region
	Data []byte // Region.Length bytes
}

type saharaState int

const (
	saharaWaitHelloResp saharaState = iota
	saharaWaitData
	saharaWaitDone
	saharaWaitRead // memory debug: MEMORY_READ or RESET
	saharaOver
)

// ErrSaharaHost is wrapped by Sahara.Err for a host protocol error (and
// for a Sahara set up without images or dump).
var ErrSaharaHost = errors.New("sim: Sahara host protocol error")

// Start implements Function: the SBL says HELLO.
func (s *Sahara) Start(p *Port) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.port, s.state, s.img, s.off, s.err, s.done = p, saharaWaitHelloResp, 0, 0, nil, false
	s.received = map[uint32][]byte{}
	mode := sahara.ModeImageTxPending
	if s.Dump != nil {
		mode = sahara.ModeMemoryDebug
		rs := make([]sahara.Region, len(s.Dump))
		for i, r := range s.Dump {
			rs[i] = r.Region
		}
		s.table = sahara.AppendTable(nil, rs, s.Wide)
	} else {
		if len(s.Images) == 0 {
			s.fail(errors.New("the emulated SBL was given no images to load"))
			return
		}
		for _, im := range s.Images {
			if im.Size <= 0 {
				s.fail(fmt.Errorf("emulated image %d has size %d", im.ID, im.Size))
				return
			}
		}
	}
	s.send(sahara.Packet{Cmd: sahara.CmdHello, Version: sahara.Version, Compatible: sahara.VersionCompatible, MaxLen: 0x400, Mode: mode})
}

// Stop implements Function.
func (s *Sahara) Stop() {
	s.mu.Lock()
	s.port = nil
	s.mu.Unlock()
}

// Receive implements Function.
func (s *Sahara) Receive(td []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == saharaOver {
		return
	}
	p, err := sahara.Decode(td)
	if s.state == saharaWaitData && (uint64(len(td)) == s.want || err != nil || p.Cmd != sahara.CmdReset) {
		// Raw image data; only a RESET of another size than the
		// data asked for is a command (the host giving up).
		s.data(td)
		return
	}
	if err != nil {
		s.fail(err)
		return
	}
	if p.Cmd == sahara.CmdReset {
		s.send(sahara.Packet{Cmd: sahara.CmdResetResp})
		s.state = saharaOver
		s.done = s.Dump != nil
		return
	}
	switch {
	case s.state == saharaWaitHelloResp && p.Cmd == sahara.CmdHelloResp:
		if p.Status != sahara.StatusSuccess || p.Version < 2 {
			s.fail(fmt.Errorf("HELLO_RESP status %#x version %d", p.Status, p.Version))
			return
		}
		if s.Dump != nil {
			cmd := sahara.CmdMemoryDebug
			if s.Wide {
				cmd = sahara.CmdMemoryDebug64
			}
			s.state = saharaWaitRead
			s.send(sahara.Packet{Cmd: cmd, Offset: s.TableAddress, Length: uint64(len(s.table))})
			return
		}
		s.nextRead()
	case s.state == saharaWaitDone && p.Cmd == sahara.CmdDone:
		s.img++
		s.off = 0
		if s.img < len(s.Images) {
			s.send(sahara.Packet{Cmd: sahara.CmdDoneResp, Status: sahara.DonePending})
			s.nextRead()
			return
		}
		s.send(sahara.Packet{Cmd: sahara.CmdDoneResp, Status: sahara.DoneComplete})
		s.state, s.done = saharaOver, true
	case s.state == saharaWaitRead && (p.Cmd == sahara.CmdMemoryRead || p.Cmd == sahara.CmdMemoryRead64):
		if (p.Cmd == sahara.CmdMemoryRead64) != s.Wide {
			s.fail(fmt.Errorf("%v in a %v session", p.Cmd, map[bool]string{true: "64-bit", false: "32-bit"}[s.Wide]))
			return
		}
		b, ok := s.memory(p.Offset, p.Length)
		if !ok {
			// The boot loader's refusal: a 16-byte END_OF_IMAGE.
			s.send(sahara.Packet{Cmd: sahara.CmdEndOfImage, Status: sahara.StatusReadDataError})
			return
		}
		s.sendRaw(b)
	default:
		s.fail(fmt.Errorf("%v unexpected in state %d", p.Cmd, s.state))
	}
}

// memory returns the bytes at [addr, addr+n) of the table or one region.
func (s *Sahara) memory(addr, n uint64) ([]byte, bool) {
	in := func(base uint64, b []byte) ([]byte, bool) {
		if addr < base || addr-base > uint64(len(b)) || n > uint64(len(b))-(addr-base) || n == 0 {
			return nil, false
		}
		return b[addr-base : addr-base+n], true
	}
	if b, ok := in(s.TableAddress, s.table); ok {
		return b, true
	}
	for _, r := range s.Dump {
		if b, ok := in(r.Address, r.Data); ok {
			return b, true
		}
	}
	return nil, false
}

func (s *Sahara) nextRead() {
	im := s.Images[s.img]
	chunk := s.Chunk
	if chunk <= 0 {
		chunk = 0x10000
	}
	n := min(chunk, im.Size-s.off)
	s.want = uint64(n)
	s.state = saharaWaitData
	cmd := sahara.CmdReadData
	if s.Wide {
		cmd = sahara.CmdReadData64
	}
	s.send(sahara.Packet{Cmd: cmd, Image: uint64(im.ID), Offset: uint64(s.off), Length: uint64(n)})
}

// data takes the host's raw answer to READ_DATA: exactly the asked size.
func (s *Sahara) data(td []byte) {
	im := s.Images[s.img]
	if uint64(len(td)) != s.want {
		s.fail(fmt.Errorf("READ_DATA of %d bytes answered with %d", s.want, len(td)))
		s.send(sahara.Packet{Cmd: sahara.CmdEndOfImage, Image: uint64(im.ID), Status: sahara.StatusInvalidPacketSize})
		return
	}
	s.received[im.ID] = append(s.received[im.ID], td...)
	s.off += len(td)
	if s.off < im.Size {
		s.nextRead()
		return
	}
	s.state = saharaWaitDone
	s.send(sahara.Packet{Cmd: sahara.CmdEndOfImage, Image: uint64(im.ID), Status: sahara.StatusSuccess})
}

func (s *Sahara) fail(err error) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: %w", ErrSaharaHost, err)
	}
	s.state = saharaOver
}

func (s *Sahara) send(p sahara.Packet) {
	b, err := sahara.Append(nil, p)
	if err != nil {
		s.fail(err)
		return
	}
	s.sendRaw(b)
}

func (s *Sahara) sendRaw(b []byte) {
	if s.port == nil {
		return
	}
	if err := s.port.Send(b); err != nil && s.err == nil {
		s.err = fmt.Errorf("sim: Sahara send: %w", err)
	}
}

// Received returns a copy of the bytes received for image id.
func (s *Sahara) Received(id uint32) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.received[id])
}

// Finished reports whether the session ended as the protocol wants:
// every image loaded (DONE_RESP complete) or the dump ended by RESET.
func (s *Sahara) Finished() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// Err returns the first host protocol error or send failure.
func (s *Sahara) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
