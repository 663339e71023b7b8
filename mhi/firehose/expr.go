package firehose

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrExpr wraps every refusal of a sector or value expression.
var ErrExpr = errors.New("firehose: bad expression")

// Env is what an expression may refer to: NUM_DISK_SECTORS (the sectors
// of the LUN the command addresses) and CRC32(start_sector, bytes) over
// the disk's current contents. CRC32 may be nil where no disk is at hand
// (a host evaluating a plan).
type Env struct {
	NumDiskSectors uint64
	CRC32          func(startSector, length uint64) (uint32, error)
}

const maxExprLen = 256

// Eval evaluates a start_sector or patch value as the programmers do
// (qdl tests/data patch0.xml): sums and differences of products of
// numbers, NUM_DISK_SECTORS, CRC32(a,b) and parentheses. Numbers are
// decimal, with or without the trailing dot the generated files add
// (their note says Trace32 reads undotted numbers as hex; the
// programmers and qdl read them as decimal), or 0x hex. The result must
// not go below zero or overflow 64 bits.
func Eval(s string, env Env) (uint64, error) {
	if len(s) > maxExprLen {
		return 0, fmt.Errorf("%w: %d characters", ErrExpr, len(s))
	}
	p := &exprParser{s: strings.TrimSpace(s), env: env}
	v, err := p.sum(0)
	if err != nil {
		return 0, fmt.Errorf("%w %q: %v", ErrExpr, s, err)
	}
	p.space()
	if p.i != len(p.s) {
		return 0, fmt.Errorf("%w %q: junk at %d", ErrExpr, s, p.i)
	}
	return v, nil
}

type exprParser struct {
	s   string
	i   int
	env Env
}

const maxDepth = 16

func (p *exprParser) space() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *exprParser) sum(depth int) (uint64, error) {
	v, err := p.product(depth)
	if err != nil {
		return 0, err
	}
	for {
		p.space()
		if p.i >= len(p.s) || (p.s[p.i] != '+' && p.s[p.i] != '-') {
			return v, nil
		}
		op := p.s[p.i]
		p.i++
		w, err := p.product(depth)
		if err != nil {
			return 0, err
		}
		if op == '+' {
			if v+w < v {
				return 0, errors.New("overflow")
			}
			v += w
		} else {
			if w > v {
				return 0, errors.New("negative result")
			}
			v -= w
		}
	}
}

func (p *exprParser) product(depth int) (uint64, error) {
	v, err := p.atom(depth)
	if err != nil {
		return 0, err
	}
	for {
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '*' {
			return v, nil
		}
		p.i++
		w, err := p.atom(depth)
		if err != nil {
			return 0, err
		}
		if w != 0 && v > ^uint64(0)/w {
			return 0, errors.New("overflow")
		}
		v *= w
	}
}

func (p *exprParser) atom(depth int) (uint64, error) {
	if depth > maxDepth {
		return 0, errors.New("nested too deeply")
	}
	p.space()
	rest := p.s[p.i:]
	switch {
	case rest == "":
		return 0, errors.New("missing operand")
	case rest[0] == '(':
		p.i++
		v, err := p.sum(depth + 1)
		if err != nil {
			return 0, err
		}
		if err := p.expect(')'); err != nil {
			return 0, err
		}
		return v, nil
	case strings.HasPrefix(rest, "NUM_DISK_SECTORS"):
		p.i += len("NUM_DISK_SECTORS")
		if p.env.NumDiskSectors == 0 {
			return 0, errors.New("NUM_DISK_SECTORS unknown here")
		}
		return p.env.NumDiskSectors, nil
	case strings.HasPrefix(rest, "CRC32("):
		p.i += len("CRC32(")
		a, err := p.sum(depth + 1)
		if err != nil {
			return 0, err
		}
		if err := p.expect(','); err != nil {
			return 0, err
		}
		b, err := p.sum(depth + 1)
		if err != nil {
			return 0, err
		}
		if err := p.expect(')'); err != nil {
			return 0, err
		}
		if p.env.CRC32 == nil {
			return 0, errors.New("CRC32 needs the disk")
		}
		c, err := p.env.CRC32(a, b)
		return uint64(c), err
	}
	j := p.i
	base := 10
	if strings.HasPrefix(rest, "0x") || strings.HasPrefix(rest, "0X") {
		base, j = 16, j+2
	}
	k := j
	for k < len(p.s) && isDigit(p.s[k], base) {
		k++
	}
	if k == j {
		return 0, fmt.Errorf("unexpected %q", rest[:1])
	}
	v, err := strconv.ParseUint(p.s[j:k], base, 64)
	if err != nil {
		return 0, err
	}
	p.i = k
	if base == 10 && p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
	}
	return v, nil
}

func (p *exprParser) expect(c byte) error {
	p.space()
	if p.i >= len(p.s) || p.s[p.i] != c {
		return fmt.Errorf("want %q at %d", c, p.i)
	}
	p.i++
	return nil
}

func isDigit(c byte, base int) bool {
	if c >= '0' && c <= '9' {
		return true
	}
	return base == 16 && (c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F')
}
