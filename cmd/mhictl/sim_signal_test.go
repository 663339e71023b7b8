package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSignalPresetsParse: every -signal preset is a valid schedule, the
// default drifts, and -signal list names them all.
func TestSignalPresetsParse(t *testing.T) {
	for _, p := range signalPresets {
		c, err := loadSignal(p.name)
		if err != nil || len(c.Schedule.Steps) == 0 || c.LTE == nil {
			t.Errorf("preset %s: %+v, %v", p.name, c, err)
		}
	}
	if c, _ := loadSignal(signalPresets[0].name); c.Drift.Interval <= 0 {
		t.Errorf("the default preset %s does not drift", signalPresets[0].name)
	}
	if c, _ := loadSignal("endc"); c.Schedule.Period != time.Minute || c.NR == nil || len(c.Schedule.Steps[1].Components) != 1 {
		t.Errorf("endc: %+v", c.Schedule)
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"sim", "serve", "-signal", "list"}, &out, &out); code != 0 {
		t.Fatalf("-signal list: exit %d: %s", code, out.String())
	}
	for _, p := range signalPresets {
		if !strings.Contains(out.String(), p.name+"\n  ") {
			t.Errorf("-signal list lacks %s:\n%s", p.name, out.String())
		}
	}
}

// TestSignalFileParsesStepsRepeatAndDrift: a schedule file's steps keep
// their times, RATs and bands; repeat= and drift= set the period and the
// walk; the first step is the configured cell.
func TestSignalFileParsesStepsRepeatAndDrift(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cell.csv")
	os.WriteFile(file, []byte("# a drive past a tower\n0s,lte=-85/-7/20,bands=B3\n\n1m30s,lte=-100/-12/6,nr=-95/-11/9,bands=B20+n78 # EN-DC\nrepeat=3m\ndrift=7/500ms\n"), 0o600)
	c, err := loadSignal(file)
	if err != nil {
		t.Fatal(err)
	}
	st := c.Schedule.Steps
	if len(st) != 2 || st[0].At != 0 || st[1].At != 90*time.Second || st[1].NR == nil || st[1].LTE.RSRP != -100 ||
		len(st[1].Components) != 2 || st[1].Components[0].Band != 20 || !st[1].Components[1].NR {
		t.Errorf("steps %+v", st)
	}
	if c.Schedule.Period != 3*time.Minute || c.Drift.Seed != 7 || c.Drift.Interval != 500*time.Millisecond || c.LTE.RSRP != -85 {
		t.Errorf("cell %+v", c)
	}
}

func TestSignalRejectsBadSchedules(t *testing.T) {
	for name, text := range map[string]string{
		"no steps":        "repeat=1m\n",
		"no time":         "lte=-90/-9/13\n",
		"bad time":        "soon,lte=-90/-9/13\n",
		"time backwards":  "10s,lte=-90/-9/13\n5s,lte=-95/-9/13\n",
		"no RAT":          "0s,bands=B3\n",
		"bad measurement": "0s,lte=-90/-9\n",
		"drift in a step": "0s,lte=-90/-9/13,drift=1/1s\n",
		"short repeat":    "0s,lte=-90/-9/13\n30s,lte=-95/-9/13\nrepeat=20s\n",
		"bad repeat":      "0s,lte=-90/-9/13\nrepeat=x\n",
		"unknown band":    "0s,lte=-90/-9/13,bands=B15\n",
	} {
		file := filepath.Join(t.TempDir(), "cell")
		os.WriteFile(file, []byte(text), 0o600)
		if _, err := loadSignal(file); err == nil {
			t.Errorf("%s: %q accepted", name, text)
		}
	}
	var out bytes.Buffer
	code := run(context.Background(), []string{"sim", "serve", "-socket", filepath.Join(t.TempDir(), "s"), "-signal", "no-such-preset"}, &out, &out)
	if code != 2 || !strings.Contains(out.String(), "fade") {
		t.Errorf("-signal no-such-preset: exit %d, want 2 naming the presets:\n%s", code, out.String())
	}
}
