package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mhistack/mhistack/mhi/firehose"
)

// Firehose is the emulated flash programmer on the FIREHOSE pair (EE FP):
// it answers Firehose XML (mhi/firehose's codec) over Storage — nop,
// configure (payload negotiation), getstorageinfo, program and read with
// their raw phases, erase, patch (NUM_DISK_SECTORS and CRC32 expressions
// over the current disk contents), setbootablestoragedrive and power —
// and NAKs anything else with a <log> that says why. The zero value runs
// on two 8192-sector UFS LUNs.
//
// One goroutine, started in Start and stopped in Stop, owns the session:
// Receive only queues the host's transfers for it, so that a long read
// can wait for host buffers without stalling the modem. Faults (NAKNext,
// StallAfter, PowerLossAfter) are armed from any goroutine.
type Firehose struct {
	// Storage is the flash; nil: made at the first Start.
	Storage *Storage
	// MaxPayload is the largest raw write accepted (default 1 MiB).
	MaxPayload int

	// Requests counts the transfers received.
	Requests atomic.Uint64

	mu      sync.Mutex // guards the fields below
	port    *Port
	queue   [][]byte
	queued  int
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	nak     map[string]string
	stallAt int64 // raw bytes into the next program; -1: off
	lossAt  int64
	resets  int
	errs    []string
}

// Bounds of the emulated programmer.
const (
	fhDefaultPayload = 1 << 20
	fhMaxQueued      = 32 << 20 // host bytes queued for the session goroutine
	fhMaxXML         = 4096     // MaxXMLSizeInBytes reported
)

// Firehose responses as the programmer writes them.
var (
	FirehoseACK = firehose.AppendDocument(nil, firehose.Elem("response", "value", "ACK"))
	FirehoseNAK = firehose.AppendDocument(nil, firehose.Elem("response", "value", "NAK"))
)

// NAKNext makes the next command named cmd fail with a NAK whose log
// line is reason.
func (f *Firehose) NAKNext(cmd, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nak == nil {
		f.nak = map[string]string{}
	}
	f.nak[cmd] = reason
}

// StallAfter makes the next program stop answering after n raw bytes:
// the data is taken and dropped, no final ACK comes (a programmer stuck
// writing).
func (f *Firehose) StallAfter(n int64) { f.mu.Lock(); f.stallAt = n; f.mu.Unlock() }

// PowerLossAfter cuts power in the next program after n raw bytes: the
// whole sectors received before that are on Storage, nothing after, and
// the programmer answers nothing more until its pair restarts. A reset
// of the programmer mid-program looks the same to the host.
func (f *Firehose) PowerLossAfter(n int64) { f.mu.Lock(); f.lossAt = n; f.mu.Unlock() }

// Resets returns how many power commands the programmer obeyed.
func (f *Firehose) Resets() int { f.mu.Lock(); defer f.mu.Unlock(); return f.resets }

// Errors returns the host protocol errors seen (each also NAKed).
func (f *Firehose) Errors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.errs...)
}

// Start implements Function.
func (f *Firehose) Start(p *Port) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Storage == nil {
		f.Storage, _ = NewStorage(StorageUFS, 8192, 8192)
	}
	if f.nak == nil {
		f.nak = map[string]string{}
		f.stallAt, f.lossAt = -1, -1
	}
	f.port, f.queue, f.queued = p, nil, 0
	f.wake, f.stop, f.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	s := &fhSession{f: f, port: p, stop: f.stop, payload: f.maxPayload()}
	go s.run(f.wake, f.done)
}

// Stop implements Function: the session goroutine ends before Stop
// returns.
func (f *Firehose) Stop() {
	f.mu.Lock()
	stop, done := f.stop, f.done
	f.port, f.stop, f.queue, f.queued = nil, nil, nil, 0
	f.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// Receive implements Function.
func (f *Firehose) Receive(td []byte) {
	f.Requests.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.port == nil {
		return
	}
	if f.queued+len(td) > fhMaxQueued {
		f.errs = append(f.errs, fmt.Sprintf("host sent more than %d bytes the programmer had not taken yet: dropped", fhMaxQueued))
		return
	}
	f.queue = append(f.queue, bytes.Clone(td))
	f.queued += len(td)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *Firehose) maxPayload() int {
	if f.MaxPayload > 0 {
		return f.MaxPayload
	}
	return fhDefaultPayload
}

// take returns the queued transfers.
func (f *Firehose) take() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue
	f.queue, f.queued = nil, 0
	return q
}

func (f *Firehose) fault(cmd string) (reason string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reason, ok = f.nak[cmd]
	delete(f.nak, cmd)
	return
}

func (f *Firehose) takeRawFaults() (stall, loss int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	stall, loss = f.stallAt, f.lossAt
	f.stallAt, f.lossAt = -1, -1
	return
}

func (f *Firehose) note(err string) {
	f.mu.Lock()
	if len(f.errs) < 1000 {
		f.errs = append(f.errs, err)
	}
	f.mu.Unlock()
}

// fhSession is one run of the programmer, owned by its goroutine.
type fhSession struct {
	f       *Firehose
	port    *Port
	stop    chan struct{}
	split   firehose.Splitter
	payload int
	memory  string
	dead    bool // power lost or reset: answers nothing more
	raw     *fhRaw
}

// fhRaw is a program's raw phase.
type fhRaw struct {
	lun         int
	next        uint64 // sector the next whole sector goes to
	left        int64  // bytes still due
	got         int64  // bytes received
	partial     []byte // bytes of an unfinished sector
	stall, loss int64
	err         string
}

func (s *fhSession) run(wake <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-s.stop:
			return
		case <-wake:
		}
		for _, td := range s.f.take() {
			s.input(td)
		}
	}
}

func (s *fhSession) input(td []byte) {
	if s.dead {
		return
	}
	if s.raw != nil {
		n := int(min(int64(len(td)), s.raw.left))
		s.rawData(td[:n])
		td = td[n:]
		if len(td) == 0 {
			return
		}
	}
	s.split.Write(td)
	for !s.dead && s.raw == nil {
		doc, ok, err := s.split.Next()
		if err != nil {
			s.nakf("", "ERROR: %v", err)
			return
		}
		if !ok {
			return
		}
		es, err := firehose.ParseDocument(doc)
		if err != nil || len(es) != 1 {
			s.nakf("", "ERROR: want one command per document: %v", err)
			continue
		}
		s.command(es[0])
	}
	// Raw bytes that arrived with the command document.
	if s.raw != nil && s.split.Buffered() > 0 {
		b := s.split.Take(int(min(int64(s.split.Buffered()), s.raw.left)))
		s.rawData(bytes.Clone(b))
	}
}

// send writes b to the host, waiting for DL room until the session stops.
func (s *fhSession) send(b []byte) bool {
	if s.port == nil { // a session driven without a modem (the fuzz test)
		return false
	}
	for {
		err := s.port.Send(b)
		if err == nil {
			return true
		}
		if !errors.Is(err, ErrNoBuffer) {
			return false
		}
		select {
		case <-s.stop:
			return false
		default:
		}
	}
}

func (s *fhSession) respond(logs []string, value string, attrs ...string) {
	var es []firehose.Element
	for _, l := range logs {
		es = append(es, firehose.Elem("log", "value", l))
	}
	es = append(es, firehose.Elem("response", append([]string{"value", value}, attrs...)...))
	s.send(firehose.AppendDocument(nil, es...))
}

func (s *fhSession) ack(attrs ...string) { s.respond(nil, "ACK", attrs...) }

func (s *fhSession) nakf(cmd, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.f.note(strings.TrimSpace(cmd + " " + msg))
	s.respond([]string{msg}, "NAK")
}

// sectors reads the addressing attributes every sector command has and
// checks them against the storage.
func (s *fhSession) sectors(e firehose.Element, needCount bool) (l int, start, n uint64, err error) {
	st := s.f.Storage
	ss, err := strconv.Atoi(e.Value("SECTOR_SIZE_IN_BYTES"))
	if err != nil || ss != st.SectorSize() {
		return 0, 0, 0, fmt.Errorf("SECTOR_SIZE_IN_BYTES %q, storage has %d", e.Value("SECTOR_SIZE_IN_BYTES"), st.SectorSize())
	}
	l, err = strconv.Atoi(e.Value("physical_partition_number"))
	if err != nil || st.Sectors(l) == 0 {
		return 0, 0, 0, fmt.Errorf("no LUN %q", e.Value("physical_partition_number"))
	}
	env := firehose.Env{NumDiskSectors: st.Sectors(l)}
	if start, err = firehose.Eval(e.Value("start_sector"), env); err != nil {
		return 0, 0, 0, err
	}
	if n, err = strconv.ParseUint(strings.TrimSuffix(e.Value("num_partition_sectors"), "."), 10, 64); err != nil || (needCount && n == 0) {
		return 0, 0, 0, fmt.Errorf("num_partition_sectors %q", e.Value("num_partition_sectors"))
	}
	if start > st.Sectors(l) || n > st.Sectors(l)-start {
		return 0, 0, 0, fmt.Errorf("sectors %d+%d outside LUN %d (%d sectors)", start, n, l, st.Sectors(l))
	}
	return l, start, n, nil
}

func (s *fhSession) command(e firehose.Element) {
	if reason, ok := s.f.fault(e.Name); ok {
		s.nakf(e.Name, "%s", reason)
		return
	}
	st := s.f.Storage
	switch e.Name {
	case "nop":
		s.ack()
	case "configure":
		if !strings.EqualFold(e.Value("MemoryName"), st.Kind()) {
			s.nakf(e.Name, "ERROR: MemoryName %q, this device has %s", e.Value("MemoryName"), st.Kind())
			return
		}
		want, err := strconv.Atoi(e.Value("MaxPayloadSizeToTargetInBytes"))
		if err != nil || want < st.SectorSize() {
			s.nakf(e.Name, "ERROR: MaxPayloadSizeToTargetInBytes %q", e.Value("MaxPayloadSizeToTargetInBytes"))
			return
		}
		limit := s.f.maxPayload()
		s.payload, s.memory = min(want, limit), st.Kind()
		s.ack("MemoryName", st.Kind(), "MaxPayloadSizeToTargetInBytes", strconv.Itoa(s.payload),
			"MaxPayloadSizeToTargetInBytesSupported", strconv.Itoa(limit), "MaxXMLSizeInBytes", strconv.Itoa(fhMaxXML),
			"Version", "1", "MinVersionSupported", "1", "TargetName", "mhistack-sim")
	case "getstorageinfo":
		l, err := strconv.Atoi(e.Value("physical_partition_number"))
		if err != nil || st.Sectors(l) == 0 {
			s.nakf(e.Name, "ERROR: no LUN %q", e.Value("physical_partition_number"))
			return
		}
		blocks, block, page := st.Sectors(l), st.SectorSize(), 0
		if st.pagesPerBlock > 0 {
			blocks, block, page = blocks/uint64(st.pagesPerBlock), block*st.pagesPerBlock, st.SectorSize()
		}
		info := fmt.Sprintf(`INFO: {"storage_info": {"total_blocks":%d, "block_size":%d, "page_size":%d, "num_physical":%d, "mem_type":%q, "prod_name":"mhistack-sim"}}`,
			blocks, block, page, st.LUNs(), strings.ToUpper(st.Kind()))
		s.respond([]string{info}, "ACK")
	case "program":
		l, start, n, err := s.sectors(e, true)
		if err != nil {
			s.nakf(e.Name, "ERROR: %v", err)
			return
		}
		stall, loss := s.f.takeRawFaults()
		s.raw = &fhRaw{lun: l, next: start, left: int64(n) * int64(st.SectorSize()), stall: stall, loss: loss}
		s.ack("rawmode", "true")
	case "read":
		l, start, n, err := s.sectors(e, true)
		if err != nil {
			s.nakf(e.Name, "ERROR: %v", err)
			return
		}
		s.ack("rawmode", "true")
		s.streamRead(l, start, n)
	case "erase":
		l, err := strconv.Atoi(e.Value("physical_partition_number"))
		if err != nil || st.Sectors(l) == 0 {
			s.nakf(e.Name, "ERROR: no LUN %q", e.Value("physical_partition_number"))
			return
		}
		start, n := uint64(0), st.Sectors(l)
		if _, has := e.Get("num_partition_sectors"); has {
			if _, start, n, err = s.sectors(e, true); err != nil {
				s.nakf(e.Name, "ERROR: %v", err)
				return
			}
		}
		if err := st.erase(l, start, n); err != nil {
			s.nakf(e.Name, "ERROR: %v", err)
			return
		}
		s.ack()
	case "patch":
		if err := s.patch(e); err != nil {
			s.nakf(e.Name, "ERROR: %v", err)
			return
		}
		s.ack()
	case "setbootablestoragedrive":
		l, err := strconv.Atoi(e.Value("value"))
		if err != nil || st.Sectors(l) == 0 {
			s.nakf(e.Name, "ERROR: no LUN %q", e.Value("value"))
			return
		}
		st.setBootable(l)
		s.ack()
	case "power":
		switch e.Value("value") {
		case "reset", "off":
			s.f.mu.Lock()
			s.f.resets++
			s.f.mu.Unlock()
			s.ack()
			s.dead = true
		default:
			s.nakf(e.Name, "ERROR: power value %q", e.Value("value"))
		}
	default:
		s.nakf(e.Name, "ERROR: unsupported command <%s>", e.Name)
	}
}

func (s *fhSession) patch(e firehose.Element) error {
	st := s.f.Storage
	if e.Value("filename") != "DISK" {
		return fmt.Errorf("filename %q: only DISK is patched on the target", e.Value("filename"))
	}
	l, err := strconv.Atoi(e.Value("physical_partition_number"))
	if err != nil || st.Sectors(l) == 0 {
		return fmt.Errorf("no LUN %q", e.Value("physical_partition_number"))
	}
	if ss, err := strconv.Atoi(e.Value("SECTOR_SIZE_IN_BYTES")); err != nil || ss != st.SectorSize() {
		return fmt.Errorf("SECTOR_SIZE_IN_BYTES %q, storage has %d", e.Value("SECTOR_SIZE_IN_BYTES"), st.SectorSize())
	}
	env := firehose.Env{NumDiskSectors: st.Sectors(l), CRC32: func(sector, n uint64) (uint32, error) { return st.crc32(l, sector, n) }}
	start, err := firehose.Eval(e.Value("start_sector"), env)
	if err != nil {
		return err
	}
	off, err1 := strconv.ParseUint(e.Value("byte_offset"), 10, 64)
	size, err2 := strconv.Atoi(e.Value("size_in_bytes"))
	if err1 != nil || err2 != nil || size < 1 || size > 8 {
		return fmt.Errorf("byte_offset %q size_in_bytes %q", e.Value("byte_offset"), e.Value("size_in_bytes"))
	}
	v, err := firehose.Eval(e.Value("value"), env)
	if err != nil {
		return err
	}
	if size < 8 && v>>(8*size) != 0 {
		return fmt.Errorf("value %#x does not fit %d bytes", v, size)
	}
	total := st.Sectors(l) * uint64(st.SectorSize())
	if start > st.Sectors(l) || off > total || start*uint64(st.SectorSize()) > total-off || uint64(size) > total-off-start*uint64(st.SectorSize()) {
		return fmt.Errorf("byte %d of sector %d outside LUN %d", off, start, l)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return st.patchBytes(l, start*uint64(st.SectorSize())+off, b[:size])
}

// rawData takes a program's raw bytes: whole sectors go to storage as they
// complete; at the end the final ACK (or NAK).
func (s *fhSession) rawData(b []byte) {
	r, st := s.raw, s.f.Storage
	ss := st.SectorSize()
	if len(b) > s.payload && r.err == "" {
		r.err = fmt.Sprintf("raw write of %d bytes exceeds MaxPayloadSizeToTargetInBytes %d", len(b), s.payload)
	}
	for len(b) > 0 {
		n := len(b)
		if r.loss >= 0 && r.got+int64(n) > r.loss {
			n = int(r.loss - r.got)
		}
		if r.stall >= 0 && r.got+int64(n) > r.stall {
			n = int(r.stall - r.got)
		}
		r.partial = append(r.partial, b[:n]...)
		b = b[n:]
		r.got += int64(n)
		r.left -= int64(n)
		whole := len(r.partial) / ss * ss
		if whole > 0 {
			if r.err == "" {
				if err := st.WriteSectors(r.lun, r.next, r.partial[:whole]); err != nil {
					r.err = err.Error()
				}
			}
			r.next += uint64(whole / ss)
			r.partial = append(r.partial[:0], r.partial[whole:]...)
		}
		if r.loss >= 0 && r.got == r.loss {
			s.dead, s.raw = true, nil // power gone: the partial sector is lost
			return
		}
		if r.stall >= 0 && r.got == r.stall {
			r.err = "stalled"
			r.stall = -1
			s.dead = true // swallows everything, answers nothing
			s.raw = nil
			return
		}
	}
	if r.left > 0 {
		return
	}
	s.raw = nil
	if r.err != "" {
		s.nakf("program", "ERROR: %s", r.err)
		return
	}
	s.ack("rawmode", "false")
}

// streamRead sends sectors in messages of at most 64 KiB, then the ACK.
func (s *fhSession) streamRead(l int, start, n uint64) {
	st := s.f.Storage
	per := max(1, (64<<10)/st.SectorSize())
	buf := make([]byte, per*st.SectorSize())
	for n > 0 {
		k := min(n, uint64(per))
		b := buf[:k*uint64(st.SectorSize())]
		if err := st.ReadSectors(l, start, b); err != nil {
			s.nakf("read", "ERROR: %v", err)
			return
		}
		if !s.send(b) {
			return
		}
		start += k
		n -= k
	}
	s.ack("rawmode", "false")
}
