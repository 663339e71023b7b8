package mbim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mhistack/mhistack/link/mbim"
	"github.com/mhistack/mhistack/link/simnet"
)

// endcCell is an EN-DC cell: LTE B3 (EARFCN 1300, PCI 101) and NR n78.
func endcCell() simnet.Cell {
	return simnet.Cell{
		LTE: &simnet.Measurement{RSRP: -95, RSRQ: -11, SINR: 12.5},
		NR:  &simnet.Measurement{RSRP: -101, RSRQ: -12, SINR: 7},
		Components: []simnet.Component{{Band: 3, Channel: 1300, PCI: 101, BandwidthMHz: 20},
			{NR: true, Band: 78, Channel: 636666, PCI: 7, BandwidthMHz: 100}},
	}
}

func TestNegotiateMBIMExAgreesOn2AndSignalStateCarriesRSRPAndSNRPerRAT(t *testing.T) {
	cfg := onNetwork(simnet.NetworkConfig{Cell: endcCell()})
	cfg.MaxMBIMEx = mbim.MBIMEx2 // a function from before MBIMEx 3.0
	c, _ := openPipe(t, cfg, mbim.Options{})
	ctx := testCtx(t)
	if v := c.MBIMEx(); v != mbim.MBIMEx1 {
		t.Fatalf("MBIMEx before negotiation = %v, want 1.0", v)
	}
	v, err := c.NegotiateMBIMEx(ctx)
	if err != nil || v != mbim.MBIMEx2 || c.MBIMEx() != mbim.MBIMEx2 {
		t.Fatalf("NegotiateMBIMEx = %v, %v (MBIMEx %v), want 2.0", v, err, c.MBIMEx())
	}
	sig, err := c.SignalState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sig.RSRPSNR) != 2 {
		t.Fatalf("SIGNAL_STATE v2 RsrpSnr = %+v, want LTE and NR", sig.RSRPSNR)
	}
	for i, want := range []struct {
		dc        mbim.DataClass
		rsrp, snr float64
	}{{mbim.DataClassLTE, -95, 12.5}, {mbim.DataClass5GNSA, -101, 7}} {
		e := sig.RSRPSNR[i]
		rsrp, ok1 := e.RSRPdBm()
		snr, ok2 := e.SNRdB()
		if e.SystemType != want.dc || !ok1 || !ok2 || rsrp != want.rsrp || snr != want.snr {
			t.Errorf("RsrpSnr[%d] = %+v: %v dBm, %v dB; want %v %v dBm %v dB", i, e, rsrp, snr, want.dc, want.rsrp, want.snr)
		}
	}
	// The 2.0 layouts of REGISTER_STATE and PACKET_SERVICE still read.
	if rs, err := c.RegisterState(ctx); err != nil || rs.State != mbim.RegisterHome || rs.ProviderID == "" {
		t.Errorf("RegisterState in the 2.0 layout = %+v, %v", rs, err)
	}
	bs, err := c.BaseStationsInfo(ctx)
	if err != nil || bs.LTE == nil {
		t.Fatalf("BaseStationsInfo = %+v, %v", bs, err)
	}
	if l := bs.LTE; l.EARFCN != 1300 || l.PCI != 101 || l.RSRP != -95 || l.RSRQ != -11 || l.ProviderID == "" {
		t.Errorf("LTE serving cell = %+v", *l)
	}
	if b, ok := mbim.LTEBandOfEARFCN(bs.LTE.EARFCN); !ok || b != 3 {
		t.Errorf("band of EARFCN %d = %d, %v; want 3", bs.LTE.EARFCN, b, ok)
	}
	if bs.NR != nil {
		t.Errorf("2.0 BASE_STATIONS_INFO has NR cells %+v", bs.NR)
	}
}

func TestMBIMEx3CarriesTheNRServingCellsAndThe3LayoutsOfTheOtherCommands(t *testing.T) {
	c, f := openPipe(t, onNetwork(simnet.NetworkConfig{Cell: endcCell()}), mbim.Options{})
	ctx := testCtx(t)
	if v, err := c.NegotiateMBIMEx(ctx); err != nil || v != mbim.MBIMEx3 {
		t.Fatalf("NegotiateMBIMEx = %v, %v; want 3.0", v, err)
	}
	bs, err := c.BaseStationsInfo(ctx)
	if err != nil || bs.LTE == nil || len(bs.NR) != 1 {
		t.Fatalf("BaseStationsInfo = %+v, %v; want the LTE cell and one NR cell", bs, err)
	}
	if bs.SystemType != mbim.DataClass5GNSA || bs.SystemSubType != mbim.DataSubclass5GENDC {
		t.Errorf("system %v subtype %v, want 5G with EN-DC", bs.SystemType, bs.SystemSubType)
	}
	nr := bs.NR[0]
	rsrp, _ := nr.Signal.RSRPdBm()
	rsrq, _ := nr.Signal.RSRQdB()
	sinr, _ := nr.Signal.SINRdB()
	if nr.NRARFCN != 636666 || nr.PCI != 7 || rsrp != -101 || rsrq != -12 || sinr != 7 || nr.ProviderID == "" {
		t.Errorf("NR serving cell = %+v: %v dBm %v dB %v dB; want NR-ARFCN 636666 PCI 7 -101/-12/7", nr, rsrp, rsrq, sinr)
	}
	if rs, err := c.SubscriberReadyStatus(ctx); err != nil || rs.ReadyState != mbim.ReadyInitialized || rs.SubscriberID == "" {
		t.Errorf("SubscriberReadyStatus in the 3.0 layout = %+v, %v", rs, err)
	}
	if ps, err := c.PacketService(ctx); err != nil || ps.State != mbim.PacketServiceAttached {
		t.Errorf("PacketService in the 3.0 layout = %+v, %v", ps, err)
	}
	cs, err := c.Connect(ctx, mbim.ConnectRequest{Activate: true, APN: "internet", IPType: mbim.IPTypeIPv4v6})
	if err != nil || cs.ActivationState != mbim.ActivationActivated || cs.APN != "internet" || !f.Active(0) {
		t.Fatalf("Connect in the 3.0 layout = %+v, %v (active %v)", cs, err, f.Active(0))
	}
	if cs, err := c.ConnectState(ctx, 0); err != nil || cs.ActivationState != mbim.ActivationActivated {
		t.Errorf("ConnectState in the 3.0 layout = %+v, %v", cs, err)
	}
}

func TestNegotiateMBIMExKeepsMBIM1OnAFunctionWithoutTheExtension(t *testing.T) {
	cfg := onNetwork(simnet.NetworkConfig{Cell: endcCell()})
	cfg.NoMBIMEx = true
	c, _ := openPipe(t, cfg, mbim.Options{})
	ctx := testCtx(t)
	v, err := c.NegotiateMBIMEx(ctx)
	if err != nil || v != mbim.MBIMEx1 {
		t.Fatalf("NegotiateMBIMEx = %v, %v; want 1.0 and no error", v, err)
	}
	sig, err := c.SignalState(ctx)
	if err != nil || sig.RSSI == 99 || sig.RSRPSNR != nil {
		t.Errorf("SignalState = %+v, %v; want the 1.0 layout with RSSI", sig, err)
	}
	_, err = c.BaseStationsInfo(ctx)
	if !errors.Is(err, mbim.StatusNoDeviceSupport) {
		t.Errorf("BaseStationsInfo on a 1.0 function: %v, want NO_DEVICE_SUPPORT", err)
	}
}

func TestMBIMExIsForgottenWhenTheFunctionIsOpenedAgain(t *testing.T) {
	c, _ := openPipe(t, onNetwork(simnet.NetworkConfig{Cell: endcCell()}), mbim.Options{})
	ctx := testCtx(t)
	if v, err := c.NegotiateMBIMEx(ctx); v != mbim.MBIMEx3 {
		t.Fatalf("NegotiateMBIMEx = %v, %v", v, err)
	}
	if err := c.CloseFunction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if v := c.MBIMEx(); v != mbim.MBIMEx1 {
		t.Errorf("MBIMEx after re-open = %v, want 1.0", v)
	}
	// The function too is back to 1.0: a 20-byte SIGNAL_STATE.
	b, err := c.Command(ctx, mbim.ServiceBasicConnect, mbim.CIDSignalState, mbim.Query, nil)
	if err != nil || len(b) != 20 {
		t.Errorf("SIGNAL_STATE after re-open: %d bytes, %v; want the 20-byte 1.0 layout", len(b), err)
	}
	if v, err := c.NegotiateMBIMEx(ctx); v != mbim.MBIMEx3 || err != nil {
		t.Errorf("second NegotiateMBIMEx = %v, %v", v, err)
	}
}

func TestSessionNegotiatesMBIMExAfterOpen(t *testing.T) {
	c, _ := pipeRig(t, onNetwork(simnet.NetworkConfig{}), mbim.Options{})
	s := mbim.NewSession(c, fastSession("internet", nil))
	defer s.Close(testCtx(t))
	if _, err := s.WaitUp(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if v := c.MBIMEx(); v != mbim.MBIMEx3 {
		t.Errorf("MBIMEx after the session came up = %v, want 3.0", v)
	}
}

func TestProxyTellsClientsTheMBIMExVersion(t *testing.T) {
	host, _ := openPipe(t, onNetwork(simnet.NetworkConfig{Cell: endcCell()}), mbim.Options{})
	p := testProxy(t, host, mbim.ProxyOptions{})
	early := dialProxy(t, p)
	if v := early.MBIMEx(); v != mbim.MBIMEx1 {
		t.Fatalf("proxy client's MBIMEx before the host negotiated = %v", v)
	}
	if v, err := host.NegotiateMBIMEx(testCtx(t)); v != mbim.MBIMEx3 {
		t.Fatalf("NegotiateMBIMEx = %v, %v", v, err)
	}
	// A client connected before hears the indication; one that
	// connects after gets it with its CONFIGURATION's answer.
	waitFor(t, 5*time.Second, "early client adopts 3.0", func() bool { return early.MBIMEx() == mbim.MBIMEx3 })
	late := dialProxy(t, p)
	waitFor(t, 5*time.Second, "late client adopts 3.0", func() bool { return late.MBIMEx() == mbim.MBIMEx3 })
	sig, err := late.SignalState(testCtx(t))
	if err != nil || len(sig.RSRPSNR) != 2 {
		t.Errorf("SignalState through the proxy = %+v, %v; want the 2.0 layout (3.0 keeps it)", sig, err)
	}
}

func TestProxyClientsVersionExchangeSwitchesTheHostToo(t *testing.T) {
	host, _ := openPipe(t, onNetwork(simnet.NetworkConfig{}), mbim.Options{})
	p := testProxy(t, host, mbim.ProxyOptions{})
	c := dialProxy(t, p)
	// mbimcli --device-open-ms-mbimex-v2 through the proxy.
	q := mbim.VersionInfo{MBIM: mbim.MBIMVersion1, Extended: mbim.MBIMEx2}
	b, err := c.Command(testCtx(t), mbim.ServiceMSBasicConnectExtensions, mbim.CIDMSVersion, mbim.Query, q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if a, err := mbim.ParseVersionInfo(b); err != nil || a.Extended != mbim.MBIMEx2 {
		t.Fatalf("VERSION answer = %+v, %v", a, err)
	}
	if v := host.MBIMEx(); v != mbim.MBIMEx2 {
		t.Errorf("host's MBIMEx after a client's VERSION exchange = %v, want 2.0", v)
	}
	sig, err := host.SignalState(testCtx(t))
	if err != nil || len(sig.RSRPSNR) != 1 {
		t.Errorf("host SignalState = %+v, %v", sig, err)
	}
}

func TestRSRPAndSNRCodingFollowTheReportingRanges(t *testing.T) {
	for _, tc := range []struct {
		rsrp, snr           float64
		codeRSRP, codeSNR   uint32
		backRSRP, backSNR   float64
		knownRSRP, knownSNR bool
	}{
		{-93, 13, 64, 73, -93, 13, true, true},
		{-93.4, 13.2, 63, 73, -94, 13, true, true},
		{-200, -40, 0, 0, -157, -23.5, true, true},
		{-20, 60, 126, 127, -31, 40, true, true},
	} {
		r, s := mbim.CodeRSRP(tc.rsrp), mbim.CodeSNR(tc.snr)
		e := mbim.RSRPSNR{RSRP: r, SNR: s}
		br, ok1 := e.RSRPdBm()
		bs, ok2 := e.SNRdB()
		if r != tc.codeRSRP || s != tc.codeSNR || br != tc.backRSRP || bs != tc.backSNR || ok1 != tc.knownRSRP || ok2 != tc.knownSNR {
			t.Errorf("RSRP %v SNR %v coded %d %d back %v %v; want %d %d back %v %v",
				tc.rsrp, tc.snr, r, s, br, bs, tc.codeRSRP, tc.codeSNR, tc.backRSRP, tc.backSNR)
		}
	}
	unknown := mbim.RSRPSNR{RSRP: mbim.Unknown, SNR: 128}
	if _, ok := unknown.RSRPdBm(); ok {
		t.Error("RSRP 0xFFFFFFFF decoded as a value")
	}
	if _, ok := unknown.SNRdB(); ok {
		t.Error("SNR 128 decoded as a value")
	}
}

func TestLTEBandOfEARFCN(t *testing.T) {
	for earfcn, band := range map[uint32]int{0: 1, 1300: 3, 1949: 3, 3100: 7, 6300: 20, 9360: 28, 38000: 38, 66786: 66, 68700: 71} {
		if b, ok := mbim.LTEBandOfEARFCN(earfcn); !ok || b != band {
			t.Errorf("LTEBandOfEARFCN(%d) = %d, %v; want %d", earfcn, b, ok, band)
		}
	}
	for _, earfcn := range []uint32{5000, 10360, 70000, mbim.Unknown} {
		if b, ok := mbim.LTEBandOfEARFCN(earfcn); ok {
			t.Errorf("LTEBandOfEARFCN(%d) = %d, want none", earfcn, b)
		}
	}
	for _, band := range []int{1, 3, 7, 20, 28, 66} {
		ch, ok := mbim.LTEEARFCNOfBand(band)
		if b, _ := mbim.LTEBandOfEARFCN(ch); !ok || b != band {
			t.Errorf("LTEEARFCNOfBand(%d) = %d (band %d), %v", band, ch, b, ok)
		}
	}
	if _, ok := mbim.LTEEARFCNOfBand(15); ok {
		t.Error("band 15 (reserved) has a channel")
	}
}

func TestParseSignalStateV2RejectsACountBeyondTheArray(t *testing.T) {
	s := mbim.SignalState{RSSI: 20, RSRPSNR: []mbim.RSRPSNR{{RSRP: 64, SNR: 73, SystemType: mbim.DataClassLTE}}}
	b := s.EncodeV2()
	b[28] = 2 // the count, right after the fixed part
	if _, err := mbim.ParseSignalStateV2(b); !errors.Is(err, mbim.ErrMalformed) {
		t.Errorf("count 2 with one entry: %v, want ErrMalformed", err)
	}
	b[28] = 1
	if got, err := mbim.ParseSignalStateV2(b); err != nil || len(got.RSRPSNR) != 1 || got.RSRPSNR[0].RSRP != 64 {
		t.Errorf("ParseSignalStateV2 = %+v, %v", got, err)
	}
}

// TestProxyRewritesAClientsOldLayoutRequestsAfterTheHostAgreed3: a
// libmbim client that built its CONNECT set and BASE_STATIONS_INFO query
// before it applied the proxy's VERSION indication still gets through.
func TestProxyRewritesAClientsOldLayoutRequestsAfterTheHostAgreed3(t *testing.T) {
	host, f := openPipe(t, onNetwork(simnet.NetworkConfig{Cell: endcCell()}), mbim.Options{})
	ctx := testCtx(t)
	if v, err := host.NegotiateMBIMEx(ctx); v != mbim.MBIMEx3 || err != nil {
		t.Fatalf("NegotiateMBIMEx = %v, %v", v, err)
	}
	c := dialProxy(t, testProxy(t, host, mbim.ProxyOptions{}))
	set := mbim.ConnectRequest{Activate: true, APN: "internet", IPType: mbim.IPTypeIPv4v6, ContextType: mbim.ContextTypeInternet}
	b, err := c.Command(ctx, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.Set, set.Encode())
	if err != nil || !f.Active(0) {
		t.Fatalf("1.0 CONNECT set through the proxy: %v (active %v)", err, f.Active(0))
	}
	if cs, err := mbim.ParseContextState(b); err != nil || cs.ActivationState != mbim.ActivationActivated {
		t.Errorf("the 3.0 answer read as 1.0 = %+v, %v", cs, err)
	}
	b, err = c.Command(ctx, mbim.ServiceMSBasicConnectExtensions, mbim.CIDMSBaseStationsInfo, mbim.Query, (&mbim.BaseStationsQuery{}).Encode())
	if err != nil {
		t.Fatalf("20-byte BASE_STATIONS_INFO query through the proxy: %v", err)
	}
	if bs, err := mbim.ParseBaseStationsInfoV3(b); err != nil || len(bs.NR) != 1 {
		t.Errorf("answer = %+v, %v; want the 3.0 layout with the NR cell", bs, err)
	}
}

// TestMBIMEx3PacketServiceSaysStandaloneNRThroughItsSubclass: 3.0 has one
// 5G data class bit; HighestDataClass reads the subclass to tell 5G-SA.
func TestMBIMEx3PacketServiceSaysStandaloneNRThroughItsSubclass(t *testing.T) {
	sa := simnet.Cell{NR: &simnet.Measurement{RSRP: -85, RSRQ: -11, SINR: 18}}
	for _, tc := range []struct {
		cell simnet.Cell
		want mbim.DataClass
	}{{sa, mbim.DataClass5GSA}, {endcCell(), mbim.DataClass5GNSA}} {
		c, _ := openPipe(t, onNetwork(simnet.NetworkConfig{Cell: tc.cell}), mbim.Options{})
		ctx := testCtx(t)
		if v, err := c.NegotiateMBIMEx(ctx); v != mbim.MBIMEx3 || err != nil {
			t.Fatalf("NegotiateMBIMEx = %v, %v", v, err)
		}
		ps, err := c.PacketService(ctx)
		if err != nil || ps.HighestAvailableDataClass != mbim.DataClass5GNSA || ps.HighestDataClass() != tc.want {
			t.Errorf("PacketService = %+v, %v: highest %v, want %v", ps, err, ps.HighestDataClass(), tc.want)
		}
	}
}
