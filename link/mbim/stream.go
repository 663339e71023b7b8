package mbim

import (
	"encoding/binary"
	"fmt"
)

// maxPartials bounds the messages being reassembled at once. MBIM lets
// the function interleave fragments of different transactions only in
// principle; libmbim keeps one collector per transaction, and a handful
// is plenty while keeping a hostile peer from holding memory.
const maxPartials = 4

// DecodeError reports a message or fragment the Decoder dropped. Code is
// the protocol error a function answers with (FUNCTION_ERROR carrying
// TID), so a device-side user can reply with it; a host-side user fails
// the transaction TID if it is waiting for it.
type DecodeError struct {
	Type MessageType
	TID  uint32
	Code ProtocolError
	Msg  string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("mbim: %s: %v tid=%d: %v", e.Msg, e.Type, e.TID, e.Code)
}

// Unwrap makes a DecodeError match both ErrMalformed and its Code.
func (e *DecodeError) Unwrap() []error { return []error{ErrMalformed, e.Code} }

// Decoder turns a byte stream into messages: it accumulates the bytes it
// is given, cuts them at MessageLength (message boundaries need not
// coincide with reads, as in libmbim mbim-device.c parse_response) and
// joins fragments (§2.3: in order, same type and TID, at most
// MaxInformationBuffer bytes). The zero value is ready to use. A Decoder
// is not safe for concurrent use.
type Decoder struct {
	// MaxMessage bounds one message or fragment on the wire (default
	// MaxControlTransfer). A longer MessageLength is a framing error.
	MaxMessage int

	buf      []byte
	off      int
	partials []*partial

	// Evicted counts partial messages dropped to make room.
	Evicted uint64
}

type partial struct {
	msg   Message
	want  uint32 // InformationBufferLength
	total uint32
	next  uint32 // fragment expected next
}

// Write appends stream bytes; they are copied.
func (d *Decoder) Write(p []byte) {
	if d.off > 0 && d.off == len(d.buf) {
		d.buf, d.off = d.buf[:0], 0
	} else if d.off > len(d.buf)/2 {
		n := copy(d.buf, d.buf[d.off:])
		d.buf, d.off = d.buf[:n], 0
	}
	d.buf = append(d.buf, p...)
}

// Buffered returns how many stream bytes wait for the rest of a message.
func (d *Decoder) Buffered() int { return len(d.buf) - d.off }

// Reset drops buffered bytes and partial messages (after a modem reset,
// a half-received message will never be completed).
func (d *Decoder) Reset() {
	d.buf, d.off, d.partials = d.buf[:0], 0, nil
}

// Next returns the next complete message. It returns (nil, nil) when it
// needs more bytes, and (nil, err) for a message or fragment it dropped;
// the caller keeps calling Next until (nil, nil). A MessageLength outside
// 12..MaxMessage cannot be resynchronised from, so the buffered bytes are
// dropped with the error (what libmbim does).
func (d *Decoder) Next() (*Message, error) {
	max := d.MaxMessage
	if max <= 0 {
		max = MaxControlTransfer
	}
	for {
		rest := d.buf[d.off:]
		if len(rest) < headerLen {
			return nil, nil
		}
		le := binary.LittleEndian
		n := le.Uint32(rest[4:])
		if n < headerLen || uint64(n) > uint64(max) {
			typ, tid := MessageType(le.Uint32(rest)), le.Uint32(rest[8:])
			d.buf, d.off = d.buf[:0], 0
			return nil, &DecodeError{Type: typ, TID: tid, Code: ProtoLengthMismatch,
				Msg: fmt.Sprintf("MessageLength %d outside %d..%d, %d stream bytes dropped", n, headerLen, max, len(rest))}
		}
		if uint64(len(rest)) < uint64(n) {
			return nil, nil
		}
		raw := rest[:n]
		d.off += int(n)
		m, err := d.add(raw)
		if m != nil || err != nil {
			return m, err
		}
	}
}

// add takes one message or fragment; it returns a message when one is
// complete.
func (d *Decoder) add(raw []byte) (*Message, error) {
	f, err := decodeFragment(raw)
	if err != nil {
		code := ProtoLengthMismatch
		if f.total != 0 && f.cur >= f.total {
			code = ProtoFragmentOutOfSequence
		}
		return nil, &DecodeError{Type: f.typ, TID: f.tid, Code: code, Msg: err.Error()}
	}
	if f.total == 1 {
		m := f.msg
		if f.typ.fragmented() {
			m.Buffer = append([]byte(nil), f.data...)
		}
		return &m, nil
	}
	i := d.find(f.typ, f.tid)
	if f.cur == 0 {
		if i >= 0 {
			d.remove(i) // a restarted transfer replaces the old one
		}
		if len(d.partials) == maxPartials {
			d.remove(0)
			d.Evicted++
		}
		p := &partial{msg: f.msg, want: f.infoLen, total: f.total, next: 1}
		p.msg.Buffer = make([]byte, 0, min(int(f.infoLen), 2*MaxControlTransfer))
		p.msg.Buffer = append(p.msg.Buffer, f.data...)
		d.partials = append(d.partials, p)
		return nil, nil
	}
	if i < 0 {
		return nil, &DecodeError{Type: f.typ, TID: f.tid, Code: ProtoFragmentOutOfSequence,
			Msg: fmt.Sprintf("fragment %d of %d without fragment 0", f.cur, f.total)}
	}
	p := d.partials[i]
	if f.cur != p.next || f.total != p.total {
		d.remove(i)
		return nil, &DecodeError{Type: f.typ, TID: f.tid, Code: ProtoFragmentOutOfSequence,
			Msg: fmt.Sprintf("fragment %d of %d, expected %d of %d", f.cur, f.total, p.next, p.total)}
	}
	if uint64(len(p.msg.Buffer))+uint64(len(f.data)) > uint64(p.want) {
		d.remove(i)
		return nil, &DecodeError{Type: f.typ, TID: f.tid, Code: ProtoLengthMismatch,
			Msg: fmt.Sprintf("fragments carry more than InformationBufferLength %d", p.want)}
	}
	p.msg.Buffer = append(p.msg.Buffer, f.data...)
	p.next++
	if p.next < p.total {
		return nil, nil
	}
	d.remove(i)
	if uint32(len(p.msg.Buffer)) != p.want {
		return nil, &DecodeError{Type: f.typ, TID: f.tid, Code: ProtoLengthMismatch,
			Msg: fmt.Sprintf("fragments carry %d of %d information bytes", len(p.msg.Buffer), p.want)}
	}
	m := p.msg
	return &m, nil
}

func (d *Decoder) find(t MessageType, tid uint32) int {
	for i, p := range d.partials {
		if p.msg.Type == t && p.msg.TID == tid {
			return i
		}
	}
	return -1
}

func (d *Decoder) remove(i int) {
	d.partials = append(d.partials[:i], d.partials[i+1:]...)
}
