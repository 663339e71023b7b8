package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/mhi/sim"
)

func TestEDLReachesTheFlashProgrammerAndFirehoseAnswers(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "prog_firehose_sdx55.mbn")
	os.WriteFile(prog, bytes.Repeat([]byte("ELF"), 5000), 0o644)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"edl", "-image", prog}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"EDL trigger: doorbell 91", "BHI: 15000 bytes loaded", "FP: flash programmer running", "modem in EE FP", `response value="ACK"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"edl", "-json", "-profile", "qcom-sdx55m"}, &out, &errb); code != 0 {
		t.Fatalf("-json exit %d: %s", code, errb.String())
	}
	var o edlOut
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	if o.EE != "FP" || o.Firehose != string(sim.FirehoseACK) || o.Profile != "qcom-sdx55m" {
		t.Errorf("-json: %+v", o)
	}
}

func TestEDLOnAProfileWithoutTriggerFailsAndSaysWhichHave(t *testing.T) {
	var out bytes.Buffer
	code := run(context.Background(), []string{"edl", "-profile", "cinterion-mv31"}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "no EDL trigger") || !strings.Contains(out.String(), "list -profiles") {
		t.Errorf("exit %d, output %q", code, out.String())
	}
}
