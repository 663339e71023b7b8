package firehose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Transport carries whole messages, as an MHI channel pair does
// (mhi/pairconn.Conn). A stream transport works too: documents are split
// on </data> whatever the message boundaries.
type Transport interface {
	Send(ctx context.Context, b []byte) error
	Recv(ctx context.Context) ([]byte, error)
}

// Memory names (configure's MemoryName).
const (
	MemoryUFS  = "ufs"
	MemoryEMMC = "emmc"
	MemoryNAND = "nand"
)

// Defaults of Options: the waits qdl uses (docs/FLASHING.md, "Commands").
const (
	DefaultTimeout     = 10 * time.Second  // a reply to a command
	DefaultRawTimeout  = 120 * time.Second // the ACK after a raw phase, and each raw message
	DefaultMaxPayload  = 1 << 20           // qdl's MaxPayloadSizeToTargetInBytes
	maxRetriedConfigs  = 2
	maxLogsPerResponse = 4096
)

// Errors.
var (
	// ErrNAK is wrapped by *NAKError: the target refused the command.
	ErrNAK = errors.New("firehose: target answered NAK")
	// ErrProtocol: the target answered out of turn (no rawmode where
	// one was due, too many bytes in a raw read, a reply without
	// <response>).
	ErrProtocol = errors.New("firehose: protocol error")
)

// NAKError is a NAK: the command, the target's log lines since it was
// sent (the reason, as programmers give it) and the response attributes.
type NAKError struct {
	Command string
	Logs    []string
	Attrs   []Attr
}

func (e *NAKError) Error() string {
	reason := "no reason given"
	if len(e.Logs) > 0 {
		reason = strings.Join(e.Logs, "; ")
	}
	return fmt.Sprintf("firehose: %s: NAK: %s", e.Command, reason)
}

// Unwrap makes errors.Is(err, ErrNAK) hold.
func (e *NAKError) Unwrap() error { return ErrNAK }

// Options configures a Client.
type Options struct {
	// OnLog receives every <log value="…"/> the target sends.
	OnLog func(string)
	// Timeout bounds the wait for each command's reply; RawTimeout the
	// final ACK of a program or read and each message of a raw phase.
	Timeout, RawTimeout time.Duration
	// MaxPayload is the largest raw write the host offers (default
	// DefaultMaxPayload); MaxMessage, when set, is the transport's
	// largest message (pairconn.Conn.MaxSend), which also bounds it.
	MaxPayload, MaxMessage int
}

// Client is the host's side of a Firehose session. Its methods are not
// safe for concurrent use: the protocol is one command at a time.
type Client struct {
	t       Transport
	o       Options
	split   Splitter
	payload int
}

// NewClient returns a client on t.
func NewClient(t Transport, o Options) *Client {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.RawTimeout <= 0 {
		o.RawTimeout = DefaultRawTimeout
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.MaxMessage > 0 {
		o.MaxPayload = min(o.MaxPayload, o.MaxMessage)
	}
	return &Client{t: t, o: o, payload: o.MaxPayload}
}

// Payload returns the negotiated largest raw write.
func (c *Client) Payload() int { return c.payload }

// reply is a command's answer.
type reply struct {
	resp Element
	logs []string
}

func (r reply) rawmode() bool { return r.resp.Value("rawmode") == "true" }

// nextDoc returns the next document, receiving until one is complete or
// d passes.
func (c *Client) nextDoc(ctx context.Context, d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		doc, ok, err := c.split.Next()
		if err != nil || ok {
			return doc, err
		}
		b, err := c.t.Recv(ctx)
		if err != nil {
			return nil, fmt.Errorf("firehose: waiting for the target: %w", err)
		}
		c.split.Write(b)
	}
}

// await reads documents until one holds a <response>, passing logs on.
// Logs after the response in the same document are passed on too. d
// bounds the whole wait, so a target that logs forever cannot hold it.
func (c *Client) await(ctx context.Context, cmd string, d time.Duration) (reply, error) {
	var r reply
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		doc, err := c.nextDoc(ctx, d)
		if err != nil {
			return r, fmt.Errorf("%s: %w", cmd, err)
		}
		es, err := ParseDocument(doc)
		if err != nil {
			return r, fmt.Errorf("%s: %w", cmd, err)
		}
		got := false
		for _, e := range es {
			switch e.Name {
			case "log":
				v := e.Value("value")
				if c.o.OnLog != nil {
					c.o.OnLog(v)
				}
				if len(r.logs) < maxLogsPerResponse {
					r.logs = append(r.logs, v)
				}
			case "response":
				if got {
					return r, fmt.Errorf("%w: %s: two responses in one document", ErrProtocol, cmd)
				}
				r.resp, got = e, true
			}
		}
		if got {
			if v := r.resp.Value("value"); v != "ACK" {
				return r, &NAKError{Command: cmd, Logs: r.logs, Attrs: r.resp.Attrs}
			}
			return r, nil
		}
	}
}

func (c *Client) send(ctx context.Context, b []byte, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.t.Send(ctx, b)
}

// Do sends one command and waits for its response; it is the escape hatch
// for commands without a method (ufs provisioning, peek …).
func (c *Client) Do(ctx context.Context, e Element) (Element, []string, error) {
	if err := c.send(ctx, AppendDocument(nil, e), c.o.Timeout); err != nil {
		return Element{}, nil, fmt.Errorf("firehose: %s: %w", e.Name, err)
	}
	r, err := c.await(ctx, e.Name, c.o.Timeout)
	return r.resp, r.logs, err
}

// Drain reads and logs whatever the programmer printed at start (its
// "Supported Functions" banner) until it is quiet for quiet.
func (c *Client) Drain(ctx context.Context, quiet time.Duration) {
	for {
		doc, err := c.nextDoc(ctx, quiet)
		if err != nil {
			return
		}
		if es, err := ParseDocument(doc); err == nil && c.o.OnLog != nil {
			for _, e := range es {
				if e.Name == "log" {
					c.o.OnLog(e.Value("value"))
				}
			}
		}
	}
}

// Nop pings the programmer.
func (c *Client) Nop(ctx context.Context) error {
	_, _, err := c.Do(ctx, Elem("nop", "value", "ping"))
	return err
}

// Config is what configure settled.
type Config struct {
	MemoryName string
	MaxPayload int    // MaxPayloadSizeToTargetInBytes in use
	TargetName string // when the target says
}

// Configure selects the storage and negotiates the raw payload size: the
// target's NAK may name a smaller MaxPayloadSizeToTargetInBytes, its ACK
// a smaller MaxPayloadSizeToTargetInBytesSupported; either way the host
// configures again with that value and needs an ACK (qdl's rule).
func (c *Client) Configure(ctx context.Context, memory string) (Config, error) {
	want := c.o.MaxPayload
	for try := 0; ; try++ {
		e := Elem("configure", "MemoryName", memory, "MaxPayloadSizeToTargetInBytes", strconv.Itoa(want),
			"Verbose", "0", "ZlpAwareHost", "0", "SkipStorageInit", "0")
		resp, _, err := c.Do(ctx, e)
		var nak *NAKError
		next := 0
		switch {
		case errors.As(err, &nak):
			next = attrInt(nak.Attrs, "MaxPayloadSizeToTargetInBytes")
			if next <= 0 || next >= want {
				return Config{}, err
			}
		case err != nil:
			return Config{}, err
		default:
			if s := attrInt(resp.Attrs, "MaxPayloadSizeToTargetInBytesSupported"); s > 0 && s < want {
				next = s
			}
		}
		if next == 0 {
			c.payload = want
			return Config{MemoryName: memory, MaxPayload: want, TargetName: resp.Value("TargetName")}, nil
		}
		if try == maxRetriedConfigs {
			return Config{}, fmt.Errorf("%w: configure: payload size not settled after %d tries (last offer %d)", ErrProtocol, try+1, next)
		}
		want = next
	}
}

func attrInt(as []Attr, name string) int {
	for _, a := range as {
		if a.Name == name {
			v, err := strconv.Atoi(strings.TrimSpace(a.Value))
			if err == nil && v > 0 && v <= 1<<30 {
				return v
			}
		}
	}
	return 0
}

// StorageInfo is getstorageinfo's answer for one LUN.
type StorageInfo struct {
	TotalBlocks uint64 `json:"total_blocks"`
	BlockSize   uint64 `json:"block_size"`
	PageSize    uint64 `json:"page_size"`
	NumPhysical uint64 `json:"num_physical"`
	MemType     string `json:"mem_type"`
	ProdName    string `json:"prod_name"`
}

// GetStorageInfo asks for the geometry of lun. Programmers answer in a
// log line holding JSON {"storage_info": {...}}.
func (c *Client) GetStorageInfo(ctx context.Context, lun int) (StorageInfo, error) {
	_, logs, err := c.Do(ctx, Elem("getstorageinfo", "physical_partition_number", strconv.Itoa(lun)))
	if err != nil {
		return StorageInfo{}, err
	}
	for _, l := range logs {
		i := strings.IndexByte(l, '{')
		if i < 0 || !strings.Contains(l, "storage_info") {
			continue
		}
		var v struct {
			SI StorageInfo `json:"storage_info"`
		}
		if err := json.Unmarshal([]byte(l[i:]), &v); err != nil {
			return StorageInfo{}, fmt.Errorf("%w: getstorageinfo: %v", ErrProtocol, err)
		}
		return v.SI, nil
	}
	return StorageInfo{}, fmt.Errorf("%w: getstorageinfo: no storage_info in the target's logs", ErrProtocol)
}

// Sectors addresses sectors of one LUN: program, read and erase take it.
type Sectors struct {
	SectorSize  int
	LUN         int
	StartSector string // a number or an expression the target evaluates
	NumSectors  uint64
}

func (s Sectors) attrs() []string {
	return []string{"SECTOR_SIZE_IN_BYTES", strconv.Itoa(s.SectorSize), "num_partition_sectors", strconv.FormatUint(s.NumSectors, 10),
		"physical_partition_number", strconv.Itoa(s.LUN), "start_sector", s.StartSector}
}

func (s Sectors) bytes() (int64, error) {
	if s.SectorSize <= 0 || s.NumSectors == 0 || s.NumSectors > uint64(1<<62)/uint64(s.SectorSize) {
		return 0, fmt.Errorf("firehose: %d sectors of %d bytes", s.NumSectors, s.SectorSize)
	}
	return int64(s.NumSectors) * int64(s.SectorSize), nil
}

// Program writes s.NumSectors sectors from r: the command, the target's
// ACK with rawmode="true", the raw sectors in messages of at most the
// negotiated payload (whole sectors; the last sector zero-filled when r
// ends early), then the final ACK. progress, when set, is told the bytes
// sent so far. label names the partition in errors.
func (c *Client) Program(ctx context.Context, s Sectors, label string, r io.Reader, progress func(int64)) error {
	total, err := s.bytes()
	if err != nil {
		return err
	}
	e := Elem("program", s.attrs()...)
	if label != "" {
		e.Attrs = append(e.Attrs, Attr{"label", label})
	}
	if err := c.startRaw(ctx, e); err != nil {
		return err
	}
	chunk := max(s.SectorSize, c.payload/s.SectorSize*s.SectorSize)
	buf := make([]byte, chunk)
	var sent int64
	for sent < total {
		n := int(min(int64(chunk), total-sent))
		k, err := io.ReadFull(r, buf[:n])
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("firehose: program %s: reading the image: %w", label, err)
		}
		clear(buf[k:n])
		if err := c.send(ctx, buf[:n], c.o.RawTimeout); err != nil {
			return fmt.Errorf("firehose: program %s: raw data at byte %d: %w", label, sent, err)
		}
		sent += int64(n)
		if progress != nil {
			progress(sent)
		}
	}
	r2, err := c.await(ctx, "program "+label, c.o.RawTimeout)
	if err == nil && r2.rawmode() {
		err = fmt.Errorf("%w: program %s: final ACK still in raw mode", ErrProtocol, label)
	}
	return err
}

func (c *Client) startRaw(ctx context.Context, e Element) error {
	if err := c.send(ctx, AppendDocument(nil, e), c.o.Timeout); err != nil {
		return fmt.Errorf("firehose: %s: %w", e.Name, err)
	}
	r, err := c.await(ctx, e.Name, c.o.Timeout)
	if err != nil {
		return err
	}
	if !r.rawmode() {
		return fmt.Errorf("%w: %s: ACK without rawmode=\"true\"", ErrProtocol, e.Name)
	}
	return nil
}

// Read reads s.NumSectors sectors into w: exactly that many bytes, then
// the final ACK. More raw bytes than asked for are refused.
func (c *Client) Read(ctx context.Context, s Sectors, w io.Writer, progress func(int64)) error {
	total, err := s.bytes()
	if err != nil {
		return err
	}
	if err := c.startRaw(ctx, Elem("read", s.attrs()...)); err != nil {
		return err
	}
	var got int64
	for got < total {
		if c.split.Buffered() == 0 {
			rctx, cancel := context.WithTimeout(ctx, c.o.RawTimeout)
			b, err := c.t.Recv(rctx)
			cancel()
			if err != nil {
				return fmt.Errorf("firehose: read: raw data at byte %d of %d: %w", got, total, err)
			}
			c.split.Write(b)
		}
		b := c.split.Take(int(min(int64(c.split.Buffered()), total-got)))
		if _, err := w.Write(b); err != nil {
			return err
		}
		got += int64(len(b))
		if progress != nil {
			progress(got)
		}
	}
	r, err := c.await(ctx, "read", c.o.RawTimeout)
	if err == nil && r.rawmode() {
		err = fmt.Errorf("%w: read: final ACK still in raw mode", ErrProtocol)
	}
	return err
}

// Erase erases s (NumSectors 0 and StartSector "": the whole LUN).
func (c *Client) Erase(ctx context.Context, s Sectors) error {
	e := Elem("erase", "SECTOR_SIZE_IN_BYTES", strconv.Itoa(s.SectorSize), "physical_partition_number", strconv.Itoa(s.LUN))
	if s.NumSectors != 0 {
		e.Attrs = append(e.Attrs, Attr{"num_partition_sectors", strconv.FormatUint(s.NumSectors, 10)}, Attr{"start_sector", s.StartSector})
	}
	_, _, err := c.Do(ctx, e)
	return err
}

// Patch applies one patch on the device (the target evaluates its
// expressions).
func (c *Client) Patch(ctx context.Context, p Patch) error {
	_, _, err := c.Do(ctx, p.element())
	return err
}

// SetBootableStorageDrive makes lun the one the boot ROM boots from.
func (c *Client) SetBootableStorageDrive(ctx context.Context, lun int) error {
	_, _, err := c.Do(ctx, Elem("setbootablestoragedrive", "value", strconv.Itoa(lun)))
	return err
}

// Power asks for "reset" (or "off"); after the ACK the link goes away.
func (c *Client) Power(ctx context.Context, value string, delay time.Duration) error {
	e := Elem("power", "value", value)
	if delay > 0 {
		e.Attrs = append(e.Attrs, Attr{"DelayInSeconds", strconv.Itoa(int(delay / time.Second))})
	}
	_, _, err := c.Do(ctx, e)
	return err
}
