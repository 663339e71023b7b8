package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestSelftestLoopsAPatternOverLOOPBACK(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"selftest", "-profile", "cinterion-mv31", "-count", "300", "-size", "2000"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "selftest LOOPBACK") || !strings.Contains(out.String(), "300/300 transfers") || !strings.Contains(out.String(), "MB/s") {
		t.Errorf("output %q", out.String())
	}
}

func TestSelftestUsesTheIPChannelWhenTheProfileHasNoLoopback(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"selftest", "-profile", "qcom-sdx55m", "-count", "100", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	var o selftestOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	if o.Channel != "IP_HW0" || o.Received != 100 || o.Corrupted != 0 || o.Lost != 0 || o.MBPerSec <= 0 {
		t.Errorf("-json: %+v", o)
	}
}

// DIAG's rings have 16 elements, fewer than selftest's 16 receive buffers
// plus the slot a ring keeps empty: it failed with "mhi: ring full".
func TestSelftestOnAPairWithA16ElementRing(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"selftest", "-profile", "qcom-sdx55m", "-channel", "DIAG", "-count", "200", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	var o selftestOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	if o.Channel != "DIAG" || o.Received != 200 || o.Lost != 0 || o.Corrupted != 0 {
		t.Errorf("-json: %+v", o)
	}
}
