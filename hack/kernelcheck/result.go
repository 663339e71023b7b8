package main

import (
	"time"

	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
)

// result is one guest run: a kernel and a profile, with its verdicts in
// the order they were first given.
type result struct {
	kernel, profile string
	checks          map[string]check
	order           []string
	boot            time.Duration // QEMU start to /init
	wall            time.Duration // whole run
	logDir          string
}

type check struct {
	pass, skip bool
	detail     string
	// finding: a failure that is a documented kernel limitation (a quirk
	// run's behaviour, quirks.go): reported as FAIL, not counted.
	finding string
}

// add records a verdict; a later one for the same name replaces it in
// place.
func (r *result) add(name string, pass bool, detail string) {
	if r.checks == nil {
		r.checks = map[string]check{}
	}
	if _, dup := r.checks[name]; !dup {
		r.order = append(r.order, name)
	}
	r.checks[name] = check{pass: pass, detail: detail}
}

// skipped marks a check the guest did not run, for a reason it gave.
func (r *result) skipped(name string) {
	c := r.checks[name]
	c.skip = true
	r.checks[name] = c
}

// finding marks the failed verdict name as the documented kernel
// limitation why.
func (r *result) finding(name, why string) {
	c := r.checks[name]
	c.finding = why
	r.checks[name] = c
}

// failed counts the failed verdicts that are not findings.
func (r *result) failed() int {
	n := 0
	for _, ch := range r.checks {
		if !ch.pass && ch.finding == "" {
			n++
		}
	}
	return n
}

// amend lets change adjust the verdict of a check that ran (reported and
// not skipped), e.g. with what the modem or the harness saw of it.
func (r *result) amend(name string, change func(c *check)) {
	c, ok := r.checks[name]
	if !ok || c.skip {
		return
	}
	change(&c)
	r.checks[name] = c
}

// scope names the run in reports: KERNEL/PROFILE.
func (r *result) scope() string { return r.kernel + "/" + r.profile }

// report returns the verdicts as report rows, in order.
func (r *result) report() *qh.Report {
	var rep qh.Report
	for _, name := range r.order {
		ch := r.checks[name]
		st := qh.Pass
		if ch.skip {
			st = qh.Skip
		}
		detail := ch.detail
		if !ch.pass {
			st = qh.Fail
			if ch.finding != "" {
				detail = "[finding, not counted: " + ch.finding + "] " + detail
			}
		}
		rep.Add(qh.Row{Scope: r.scope(), Name: name, Status: st, Detail: detail})
	}
	return &rep
}
