package qemuharness

import (
	"fmt"
	"io"
	"time"
)

// Status is a check's verdict.
type Status string

const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP" // does not apply, with the reason in the detail
)

// Row is one check of a Report.
type Row struct {
	Scope  string // the run it belongs to (kernel/profile), may be empty
	Name   string
	Status Status
	Detail string
	Took   time.Duration // 0: not timed
}

// Report collects verdicts in order; a name is reported once per scope
// (a later Add replaces the verdict, keeping the position).
type Report struct {
	rows []Row
}

// Add records a verdict.
func (r *Report) Add(row Row) {
	for i := range r.rows {
		if r.rows[i].Scope == row.Scope && r.rows[i].Name == row.Name {
			r.rows[i] = row
			return
		}
	}
	r.rows = append(r.rows, row)
}

// Get returns the verdict of name in scope.
func (r *Report) Get(scope, name string) (Row, bool) {
	for _, x := range r.rows {
		if x.Scope == scope && x.Name == name {
			return x, true
		}
	}
	return Row{}, false
}

// Rows returns the verdicts in order.
func (r *Report) Rows() []Row { return append([]Row(nil), r.rows...) }

// Failed counts the FAILs.
func (r *Report) Failed() int {
	n := 0
	for _, x := range r.rows {
		if x.Status == Fail {
			n++
		}
	}
	return n
}

// Print writes one line per verdict: STATUS  scope  name  [time]  detail.
func (r *Report) Print(w io.Writer) {
	for _, x := range r.rows {
		fmt.Fprintln(w, x.String())
	}
}

func (x Row) String() string {
	s := string(x.Status) + "  "
	if x.Scope != "" {
		s += x.Scope + "  "
	}
	s += fmt.Sprintf("%-24s", x.Name)
	if x.Took > 0 {
		s += fmt.Sprintf(" %7s", x.Took.Round(10*time.Millisecond))
	}
	if x.Detail != "" {
		s += " " + x.Detail
	}
	return s
}
