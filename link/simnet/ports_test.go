package simnet

import (
	"strings"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/at"
	"github.com/mhistack/mhistack/link/nmea"
)

func TestATFunctionAnswersTheATSet(t *testing.T) {
	net := NewNetwork(NetworkConfig{ProviderName: "Telekom", Cell: Cell{LTE: &Measurement{RSRP: -90}, NR: &Measurement{RSRP: -80}}})
	f := NewATFunction(net)
	net.mu.Lock()
	f.stop = net.startLocked(f)
	net.radioChangedLocked()
	net.mu.Unlock()
	defer f.Stop()
	for _, tc := range []struct {
		cmd, want string
		fails     bool
	}{
		{"AT", "", false},
		{"ATI", "Manufacturer: mhistack", false},
		{"at+csq", "+CSQ: 20,0", false},
		{"AT+CGMI", "mhistack", false},
		{"AT+CGMM", "mhistack emulated modem", false},
		{"AT+CGMR", "MHISTACK.SIM.1.0", false},
		{"AT+COPS?", `+COPS: 0,0,"Telekom",13`, false},
		{"AT+CPIN?", "+CPIN: READY", false},
		{"AT+CFUN?", "+CFUN: 1", false},
		{"AT+FOO", "", true},
	} {
		var r at.Reader
		resp, done, err := r.Feed([]byte(f.answer(tc.cmd)))
		if !done || (err != nil) != tc.fails || (tc.want != "" && (len(resp.Lines) == 0 || resp.Lines[0] != tc.want)) {
			t.Errorf("%s: %+v done %v err %v; want %q", tc.cmd, resp, done, err, tc.want)
		}
	}
	if got := NewATFunction(NewNetwork(NetworkConfig{SIMAbsent: true})).answer("AT+CPIN?"); !strings.Contains(got, "+CME ERROR: 10") {
		t.Errorf("AT+CPIN? without a SIM: %q", got)
	}
	if got := NewATFunction(NewNetwork(NetworkConfig{PIN: "1234"})).answer("AT+CPIN?"); !strings.Contains(got, "+CPIN: SIM PIN") {
		t.Errorf("AT+CPIN? on a locked SIM: %q", got)
	}
}

func TestGNSSFunctionSentencesParseWithValidChecksums(t *testing.T) {
	g := NewGNSSFunction(GNSSConfig{Latitude: -33.8568, Longitude: 151.2153, Altitude: 12, Satellites: 9})
	s := g.Sentences(time.Date(2026, 12, 2, 10, 30, 5, 250e6, time.UTC))
	if len(s) != 5 { // GGA, RMC, 3 GSV
		t.Fatalf("%d sentences: %q", len(s), s)
	}
	types := ""
	for _, l := range s {
		if len(l) > nmea.MaxSentence {
			t.Errorf("%d bytes: %q", len(l), l)
		}
		p, err := nmea.Parse(l)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		types += p.Type + " "
		if p.Type == "GGA" {
			lat, err1 := nmea.ParseLatLon(p.Fields[1], p.Fields[2])
			lon, err2 := nmea.ParseLatLon(p.Fields[3], p.Fields[4])
			if err1 != nil || err2 != nil || lat > -33.856 || lat < -33.858 || lon < 151.215 || lon > 151.216 || p.Fields[0] != "103005.25" || p.Fields[6] != "09" {
				t.Errorf("GGA %q: %v %v", l, lat, lon)
			}
		}
		if p.Type == "RMC" && p.Fields[8] != "021226" {
			t.Errorf("RMC date %q", p.Fields[8])
		}
	}
	if types != "GGA RMC GSV GSV GSV " {
		t.Errorf("sentence types %q", types)
	}
}
