package qmi_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mhistack/mhistack/link/qmi"
	"github.com/mhistack/mhistack/link/simnet"
)

// TestClientTrimsPaddedStrings: the strings of a modem that pads them
// with a NUL, a tab or CRLF (simnet.QMIQuirks.StringPad) decode without
// the padding, in DMS and NAS alike.
func TestClientTrimsPaddedStrings(t *testing.T) {
	for _, pad := range []string{"\x00", "\t", "\r\n", "\x00\r\n\t"} {
		t.Run(strings.NewReplacer("\x00", `\0`, "\t", `\t`, "\r", `\r`, "\n", `\n`).Replace(pad), func(t *testing.T) {
			c, _ := rig(t, simnet.QMIConfig{Quirks: simnet.QMIQuirks{StringPad: pad}})
			ctx := testCtx(t)
			dms, err := c.AllocateCID(ctx, qmi.ServiceDMS)
			if err != nil {
				t.Fatal(err)
			}
			d := c.Service(qmi.ServiceDMS, dms)
			r, err := d.Do(ctx, qmi.NewRequest(qmi.ServiceDMS, qmi.DMSGetIDs))
			if err != nil {
				t.Fatal(err)
			}
			if imei := qmi.ParseIDs(r).IMEI; imei != "867929060000017" {
				t.Errorf("IMEI %q", imei)
			}
			r, err = d.Do(ctx, qmi.NewRequest(qmi.ServiceDMS, qmi.DMSGetRevision))
			if err != nil {
				t.Fatal(err)
			}
			if rev, err := qmi.ParseString(r); err != nil || rev != "MHISTACK.SIM.1.0" {
				t.Errorf("revision %q, %v", rev, err)
			}
			nas, err := c.AllocateCID(ctx, qmi.ServiceNAS)
			if err != nil {
				t.Fatal(err)
			}
			r, err = c.Service(qmi.ServiceNAS, nas).Do(ctx, qmi.NewRequest(qmi.ServiceNAS, qmi.NASGetServingSystem))
			if err != nil {
				t.Fatal(err)
			}
			ss, err := qmi.ParseServingSystem(r)
			if err != nil || ss.PLMN == nil || ss.PLMN.Description != "mhistack" {
				t.Errorf("serving system %+v (PLMN %+v), %v", ss, ss.PLMN, err)
			}
		})
	}
}

// TestClientRefusesStrayReplies: replies that differ from the request in
// transaction ID, message ID, client ID or service
// (simnet.QMIQuirks.StrayReplies sends one of each, as errors, before the
// right one) are counted and dropped; the caller gets the right reply.
func TestClientRefusesStrayReplies(t *testing.T) {
	c, _ := rig(t, simnet.QMIConfig{Quirks: simnet.QMIQuirks{StrayReplies: true}})
	ctx := testCtx(t)
	if _, err := c.VersionInfo(ctx); err != nil {
		t.Fatalf("CTL: %v", err)
	}
	dms, err := c.AllocateCID(ctx, qmi.ServiceDMS)
	if err != nil {
		t.Fatalf("CTL: %v", err)
	}
	r, err := c.Service(qmi.ServiceDMS, dms).Do(ctx, qmi.NewRequest(qmi.ServiceDMS, qmi.DMSGetIDs))
	if err != nil || qmi.ParseIDs(r).IMEI == "" {
		t.Fatalf("DMS Get IDs: %v, %v", r, err)
	}
	// The strays of a request come before its reply on the stream: all
	// are counted by the time it returns.
	if got := c.Stats().Unmatched; got != 3*4 {
		t.Fatalf("unmatched replies %d, want 12", got)
	}
}

// TestClientNamesAShortTLV: a TLV shorter than its fields
// (simnet.QMIQuirks.ShortPLMN) is a malformed-message error naming the
// TLV, not a panic or a wrong value.
func TestClientNamesAShortTLV(t *testing.T) {
	c, _ := rig(t, simnet.QMIConfig{Quirks: simnet.QMIQuirks{ShortPLMN: true}})
	ctx := testCtx(t)
	nas, err := c.AllocateCID(ctx, qmi.ServiceNAS)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Service(qmi.ServiceNAS, nas).Do(ctx, qmi.NewRequest(qmi.ServiceNAS, qmi.NASGetServingSystem))
	if err != nil {
		t.Fatal(err)
	}
	_, err = qmi.ParseServingSystem(r)
	if !errors.Is(err, qmi.ErrMalformed) || !strings.Contains(err.Error(), "Get Serving System TLV 0x12: description needs 8 bytes, 7 left") {
		t.Fatalf("short PLMN TLV: %v", err)
	}
}
