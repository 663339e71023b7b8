package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// result is what the guest's serial output says.
type result struct {
	pass, fail, skip []string // test names, subtests included
	exitCode         int      // of the test binary; -1 when never reported
	initUptime       float64  // guest uptime when /init started
	endUptime        float64  // guest uptime when the tests ended
	insmodFailed     []string
	panicked         bool
}

var (
	testLineRE = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	exitRE     = regexp.MustCompile(`MHISTACK-TEST-EXIT=(\d+) uptime=([\d.]+)`)
	initRE     = regexp.MustCompile(`MHISTACK-INIT uptime=([\d.]+)`)
	insmodRE   = regexp.MustCompile(`MHISTACK-INSMOD-FAIL (\S+)`)
)

func newResult() *result { return &result{exitCode: -1} }

// line feeds one line of serial output.
func (r *result) line(s string) {
	s = strings.TrimRight(s, "\r\n")
	if m := testLineRE.FindStringSubmatch(s); m != nil {
		switch m[1] {
		case "PASS":
			r.pass = append(r.pass, m[2])
		case "FAIL":
			r.fail = append(r.fail, m[2])
		case "SKIP":
			r.skip = append(r.skip, m[2])
		}
	}
	if m := exitRE.FindStringSubmatch(s); m != nil {
		r.exitCode, _ = strconv.Atoi(m[1])
		r.endUptime, _ = strconv.ParseFloat(m[2], 64)
	}
	if m := initRE.FindStringSubmatch(s); m != nil {
		r.initUptime, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := insmodRE.FindStringSubmatch(s); m != nil {
		r.insmodFailed = append(r.insmodFailed, m[1])
	}
	if strings.Contains(s, "Kernel panic") {
		r.panicked = true
	}
}

// verdict returns nil when the run passed: the binary exited 0, nothing
// failed, and every required test passed (not skipped).
func (r *result) verdict(required []string) error {
	var problems []string
	if r.panicked {
		problems = append(problems, "guest kernel panicked")
	}
	if len(r.insmodFailed) > 0 {
		problems = append(problems, "insmod failed: "+strings.Join(r.insmodFailed, ", "))
	}
	if r.exitCode < 0 {
		problems = append(problems, "the guest never reported the test exit status (timeout or crash)")
	} else if r.exitCode != 0 {
		problems = append(problems, fmt.Sprintf("guest test binary exited %d", r.exitCode))
	}
	if len(r.fail) > 0 {
		problems = append(problems, "failed: "+strings.Join(r.fail, ", "))
	}
	for _, t := range required {
		if !slices.Contains(r.pass, t) {
			problems = append(problems, t+" did not pass (skipped or missing)")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}
