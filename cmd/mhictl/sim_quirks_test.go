package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// mhictl sim quirks runs the matrix on the profiles asked for and prints
// a row each: QDU100 (no M3: its Suspend is refused, which passes) and
// SDX75 (slow-ready, scaled down), every step ok.
func TestSimQuirksPrintsTheMatrix(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"sim", "quirks", "-profile", "qcom-qdu100,qcom-sdx75m", "-ready-delay", "50ms"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^qcom-qdu100 +no-m3,reset-on-remove +- IP_SW0 +ok .*\(no M3: refused\).* ok$`),
		regexp.MustCompile(`(?m)^qcom-sdx75m +slow-ready +mbim IP_HW0 +ok .* ok$`),
		regexp.MustCompile(`READY 50ms after power-on`),
		regexp.MustCompile(`2 of 2 profiles passed every step`),
	} {
		if !want.MatchString(s) {
			t.Errorf("output does not match %s:\n%s", want, s)
		}
	}
	if strings.Contains(s, "FAIL") {
		t.Errorf("a step failed:\n%s", s)
	}
}

func TestSimQuirksRefusesAnUnknownProfile(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"sim", "quirks", "-profile", "nokia-3310"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2 (usage)\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), `unknown profile "nokia-3310"`) {
		t.Errorf("stderr does not name the profile: %s", errb.String())
	}
}
