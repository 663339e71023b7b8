package mhi

import "time"

// The modem table (docs/PROTOCOL.md §6.2, §6.3; Linux
// drivers/bus/mhi/host/pci_generic.c, torvalds 0724869ede9c plus the recent
// mainline-tracking snapshot and the 2024 EDL-trigger patch). Where the
// kernel versions differ the later table is used (§6.2 version notes).
//
// Order matters: Match returns the first profile with a matching ID, so
// every profile carrying subsystem IDs comes before the plain Qualcomm
// vendor:device entries (17cb:0306/0308/0309/011a) it refines, exactly as
// pci_generic's mhi_pci_id_table does.
//
// Channel and event-ring slices are shared between the profiles of one
// configuration; they must be treated as read-only.

// PCI vendor IDs (§6).
const (
	pciVendorQcom      = 0x17cb
	pciVendorFoxconn   = 0x105b
	pciVendorQuectel   = 0x1eac
	pciVendorThales    = 0x1269 // Cinterion
	pciVendorNetPrisma = 0x203e
	pciVendorHP        = 0x03f0
	pciSubVendorSierra = 0x18d7
	pciSubVendorTelit  = 0x1c5d
)

// pciDev is PCI_DEVICE(vendor, device).
func pciDev(vendor, device uint16) PCIID {
	return PCIID{Vendor: vendor, Device: device}
}

// pciDevSub is PCI_DEVICE_SUB(vendor, device, subVendor, subDevice).
func pciDevSub(vendor, device, subVendor, subDevice uint16) PCIID {
	return PCIID{Vendor: vendor, Device: device, SubVendor: subVendor, SubDevice: subDevice, MatchSub: true}
}

// pciDevSubAny is PCI_DEVICE_SUB(vendor, device, subVendor, PCI_ANY_ID).
func pciDevSubAny(vendor, device, subVendor uint16) PCIID {
	return PCIID{Vendor: vendor, Device: device, SubVendor: subVendor, MatchSub: true, AnySubDevice: true}
}

// pairUD is pair with different UL and DL ring sizes (Sierra's SAHARA).
func pairUD(num int, name string, ulElems, dlElems, ulER, dlER int, ee EEMask) []ChannelConfig {
	c := pair(num, name, ulElems, ulER, dlER, ee)
	c[1].Elements = dlElems
	return c
}

// qcomV1Channels is the "qcom v1" channel set (SDX24/55/65; also "qcom v2",
// SDX75/35, which only adds ready_timeout_ms). pci_generic.c
// modem_qcom_v1_mhi_channels, §6.2, later table: IP_SW0 at 46/47 on
// ER2/ER3, IP_HW0 on ER4/ER5, IPCR DL plain (not auto-queued).
var qcomV1Channels = channels(
	pair(4, "DIAG", 16, 1, 1, eeAMSS),
	pair(12, "MBIM", 4, 0, 0, eeAMSS),
	pair(14, "QMI", 4, 0, 0, eeAMSS),
	pair(20, "IPCR", 8, 0, 0, eeAMSS),
	pair(34, "FIREHOSE", 32, 0, 0, eeFP),
	pair(46, ChannelIPSW0, 64, 2, 3, eeAMSS),
	hwPair(100, ChannelIPHW0, 128, 4, 5),
)

// qcomV1EventRings is modem_qcom_v1_mhi_events (§6.2).
var qcomV1EventRings = []EventRingConfig{
	ctrlRing(64), dataRing(128), swDataRing(64), swDataRing(64), hwRing(1024, 100), hwRing(2048, 101),
}

// Timeouts of the qcom v1/v2 configs (modem_qcom_v1_mhiv_config,
// modem_qcom_v2_mhiv_config, §6.2).
const (
	qcomTimeout        = 8000 * time.Millisecond
	qcomV2ReadyTimeout = 50000 * time.Millisecond
)

// quectelEM1xxChannels is mhi_quectel_em1xx_channels (§6.2), shared by
// Quectel EM1xx/RM5xx and NetPrisma LCUR57/FCUN69.
var quectelEM1xxChannels = channels(
	pair(0, "NMEA", 32, 0, 0, eeAMSS),
	pair(2, "SAHARA", 32, 0, 0, eeSBL),
	pair(4, "DIAG", 32, 1, 1, eeAMSS),
	pair(12, "MBIM", 32, 0, 0, eeAMSS),
	pair(32, "DUN", 32, 0, 0, eeAMSS),
	pair(34, "FIREHOSE", 32, 0, 0, eeFP),
	hwPair(100, ChannelIPHW0MBIM, 128, 2, 3),
)

// quectelEM1xxEventRings is mhi_quectel_em1xx_events (§6.2).
var quectelEM1xxEventRings = []EventRingConfig{
	ctrlRing(128), dataRing(128), hwRing(1024, 100), hwRing(1024, 101),
}

// modem_quectel_em1xx_config: timeout_ms 20000, recent ready_timeout_ms
// 50000 (§6.2).
const (
	quectelTimeout      = 20000 * time.Millisecond
	quectelReadyTimeout = 50000 * time.Millisecond
)

// foxconnMBIMSessionOffset is the MBIM session offset of Foxconn's
// SDX72/SDX75 modems and the SDX35-based T99W760: MBIM session n travels
// as NDP session 112+n (Linux mhi_wwan_mbim.c WDS_BIND_MUX_DATA_PORT_MUX_ID;
// Profile.MBIMSessionOffset).
const foxconnMBIMSessionOffset = 112

// foxconnSDX55Channels is mhi_foxconn_sdx55_channels (§6.2), recent
// version with FIREHOSE 34/35. Also used by the Foxconn SDX72 config.
var foxconnSDX55Channels = channels(
	pair(0, "LOOPBACK", 32, 0, 0, eeAMSS),
	pair(4, "DIAG", 32, 1, 1, eeAMSS),
	pair(12, "MBIM", 32, 0, 0, eeAMSS),
	pair(32, "DUN", 32, 0, 0, eeAMSS),
	pair(34, "FIREHOSE", 32, 0, 0, eeFP),
	hwPair(100, ChannelIPHW0MBIM, 128, 2, 3),
)

// foxconnSDX61Channels is mhi_foxconn_sdx61_channels: the SDX55 set plus
// NMEA 50/51 (§6.2).
var foxconnSDX61Channels = channels(
	pair(0, "LOOPBACK", 32, 0, 0, eeAMSS),
	pair(4, "DIAG", 32, 1, 1, eeAMSS),
	pair(12, "MBIM", 32, 0, 0, eeAMSS),
	pair(32, "DUN", 32, 0, 0, eeAMSS),
	pair(34, "FIREHOSE", 32, 0, 0, eeFP),
	pair(50, "NMEA", 32, 0, 0, eeAMSS),
	hwPair(100, ChannelIPHW0MBIM, 128, 2, 3),
)

// foxconnEventRings is mhi_foxconn_sdx55_events, identical to Quectel
// EM1xx's ("Event rings as Quectel EM1xx", §6.2), so one copy serves
// both; used by the SDX55, SDX61 and SDX72 configs.
var foxconnEventRings = quectelEM1xxEventRings

// modem_foxconn_sdx55/sdx61/sdx72_config: timeout_ms 20000; SDX72 adds
// ready_timeout_ms 50000 (§6.2).
const (
	foxconnTimeout           = 20000 * time.Millisecond
	foxconnSDX72ReadyTimeout = 50000 * time.Millisecond
)

// mv3xChannels is mhi_mv3x_channels (Cinterion MV31/MV32, §6.2).
var mv3xChannels = channels(
	pair(0, "LOOPBACK", 64, 0, 0, eeAMSS),
	pair(12, "MBIM", 64, 0, 0, eeAMSS),
	hwPair(100, ChannelIPHW0MBIM, 512, 2, 3),
)

// mv3xEventRings is mhi_mv3x_events (§6.2).
var mv3xEventRings = []EventRingConfig{
	ctrlRing(256), dataRing(256), hwRing(1024, 100), hwRing(1024, 101),
}

// modem_mv3x_config: timeout_ms 20000 (§6.2).
const mv3xTimeout = 20000 * time.Millisecond

// sierraEM919xChannels is mhi_sierra_em919x_channels (§6.2): SAHARA has a
// 32-element UL and a 256-element DL ring; everything else completes on
// ER0 except the hardware channels.
var sierraEM919xChannels = channels(
	pairUD(2, "SAHARA", 32, 256, 0, 0, eeSBL),
	pair(4, "DIAG", 32, 0, 0, eeAMSS),
	pair(12, "MBIM", 128, 0, 0, eeAMSS),
	pair(14, "QMI", 32, 0, 0, eeAMSS),
	pair(32, "DUN", 32, 0, 0, eeAMSS),
	hwPair(100, ChannelIPHW0, 512, 1, 2),
)

// sierraEM919xEventRings is modem_sierra_em919x_mhi_events (§6.2).
var sierraEM919xEventRings = []EventRingConfig{
	ctrlRing(2048), hwRing(2048, 100), hwRing(2048, 101),
}

// modem_sierra_em919x_config: timeout_ms 24000 (§6.2).
const sierraTimeout = 24000 * time.Millisecond

// telitFN980v1Channels is mhi_telit_fn980_hw_v1_channels (§6.2); IPCR DL
// is plain in the recent kernel (auto-queue removed).
var telitFN980v1Channels = channels(
	pair(14, "QMI", 32, 0, 0, eeAMSS),
	pair(20, "IPCR", 16, 0, 0, eeAMSS),
	hwPair(100, ChannelIPHW0, 128, 1, 2),
)

// telitFN980v1EventRings is mhi_telit_fn980_hw_v1_events (§6.2).
var telitFN980v1EventRings = []EventRingConfig{
	ctrlRing(128), hwRing(1024, 100), hwRing(2048, 101),
}

// telitFN990Channels is mhi_telit_fn990_channels (FN990, FE990A; §6.2),
// recent version with NMEA 94/95.
var telitFN990Channels = channels(
	pair(2, "SAHARA", 32, 0, 0, eeSBL),
	pair(4, "DIAG", 64, 1, 1, eeAMSS),
	pair(12, "MBIM", 32, 0, 0, eeAMSS),
	pair(32, "DUN", 32, 0, 0, eeAMSS),
	pair(92, "DUN2", 32, 1, 1, eeAMSS),
	pair(94, "NMEA", 32, 1, 1, eeAMSS),
	hwPair(100, ChannelIPHW0MBIM, 128, 2, 3),
)

// telitFN990EventRings is mhi_telit_fn990_events (§6.2), also used by the
// FN920C04 config.
var telitFN990EventRings = []EventRingConfig{
	ctrlRing(128), dataRing(128), hwRing(1024, 100), hwRing(2048, 101),
}

// telitFN920C04Channels is mhi_telit_fn920c04_channels (FN920C04, FE912C04,
// FN990B40, FE990B40; §6.2). The doc gives no element counts here except
// DIAG and IP_HW0; 32 elements are used (as in pci_generic.c and the FN990
// set), ER0 for SAHARA/QMI/DUN/FIREHOSE and ER1 for DUN2/NMEA (as FN990).
var telitFN920C04Channels = channels(
	pair(2, "SAHARA", 32, 0, 0, eeSBL),
	pair(4, "DIAG", 64, 1, 1, eeAMSS),
	pair(14, "QMI", 32, 0, 0, eeAMSS),
	pair(32, "DUN", 32, 0, 0, eeAMSS),
	pair(34, "FIREHOSE", 32, 0, 0, eeFP),
	pair(92, "DUN2", 32, 1, 1, eeAMSS),
	pair(94, "NMEA", 32, 1, 1, eeAMSS),
	hwPair(100, ChannelIPHW0, 128, 2, 3),
)

// Telit timeouts: modem_telit_fn980_hw_v1_config and
// modem_telit_fn990_config 20000 ms, modem_telit_fn920c04_config 50000 ms
// (§6.2).
const (
	telitTimeout         = 20000 * time.Millisecond
	telitFN920C04Timeout = 50000 * time.Millisecond
)

// sa8775pChannels is mhi_qcom_sa8775p_channels (§6.2): a single software
// IP channel.
var sa8775pChannels = channels(
	pair(46, ChannelIPSW0, 2048, 1, 2, eeAMSS),
)

// sa8775pEventRings is modem_qcom_sa8775p_mhi_events (§6.2).
var sa8775pEventRings = []EventRingConfig{
	ctrlRing(64), swDataRing(64), swDataRing(64),
}

// qdu100Channels is mhi_qcom_qdu100_channels (§6.2 is indicative only;
// element counts and rings from the vendor snapshot / LKML QDU100 patches,
// including the IP_SW1/IP_ETH0/IP_ETH1 addition). The kernel's lone
// channel 9 "QDSS" (declared with the UL macro, no partner) is left out:
// this model requires UL-even/DL-odd pairs, and no client here uses it.
var qdu100Channels = channels(
	pair(0, "LOOPBACK", 32, 2, 2, eeAMSS),
	pair(2, "SAHARA", 128, 1, 1, eeSBL),
	pair(4, "DIAG", 64, 3, 3, eeAMSS),
	pair(14, "NMEA", 32, 4, 4, eeAMSS),
	pair(16, "CSM_CTRL", 32, 4, 4, eeAMSS),
	pair(40, "MHI_PHC", 32, 4, 4, eeAMSS),
	pair(46, ChannelIPSW0, 256, 5, 5, eeAMSS),
	pair(48, "IP_SW1", 256, 6, 6, eeAMSS),
	pair(50, "IP_ETH0", 256, 7, 7, eeAMSS),
	pair(52, "IP_ETH1", 256, 8, 8, eeAMSS),
)

// qdu100EventRings is mhi_qcom_qdu100_events: nine rings, ER0 CTRL 64 and
// SW_DATA rings of 64–512 elements (§6.2).
var qdu100EventRings = []EventRingConfig{
	ctrlRing(64),
	swDataRing(256),                  // SAHARA
	swDataRing(64),                   // LOOPBACK
	swDataRing(256), swDataRing(256), // DIAG; NMEA, CSM_CTRL, MHI_PHC
	swDataRing(512), swDataRing(512), // IP_SW0, IP_SW1
	swDataRing(512), swDataRing(512), // IP_ETH0, IP_ETH1
}

var profiles = []*Profile{
	// ---- Entries with subsystem IDs: before the plain 17cb:xxxx ones. ----

	// Foxconn SDX55 with Qualcomm's own subsystem ID (mhi_foxconn_sdx55_info,
	// §6.3, recent: no fw, Foxconn firehose, edl_trigger).
	{
		Name:                "foxconn-sdx55",
		Description:         "Foxconn SDX55 module (17cb:0306, subsystem 17cb:010c)",
		IDs:                 []PCIID{pciDevSub(pciVendorQcom, 0x0306, pciVendorQcom, 0x010c)},
		Channels:            foxconnSDX55Channels,
		EventRings:          foxconnEventRings,
		MRU:                 32768,
		Timeout:             foxconnTimeout,
		EDLImage:            "qcom/sdx55m/foxconn/prog_firehose_sdx55.mbn",
		EDLTrigger:          true,
		NTBSequenceGlitches: true,
	},
	// Sierra EM919x/EM929x (mhi_sierra_em919x_info, §6.3; MRU from the
	// recent kernel).
	{
		Name:        "sierra-em919x",
		Description: "Sierra Wireless EM919x / EM929x",
		IDs: []PCIID{
			pciDevSub(pciVendorQcom, 0x0306, pciSubVendorSierra, 0x0200),
			pciDevSub(pciVendorQcom, 0x0308, pciSubVendorSierra, 0x0301),
		},
		Channels:   sierraEM919xChannels,
		EventRings: sierraEM919xEventRings,
		MRU:        32768,
		Timeout:    sierraTimeout,
	},
	// Telit FN980 hardware v1 (mhi_telit_fn980_hw_v1_info, §6.3).
	{
		Name:          "telit-fn980-hwv1",
		Description:   "Telit FN980 (hardware revision v1)",
		IDs:           []PCIID{pciDevSub(pciVendorQcom, 0x0306, pciSubVendorTelit, 0x2000)},
		Channels:      telitFN980v1Channels,
		EventRings:    telitFN980v1EventRings,
		MRU:           32768,
		Timeout:       telitTimeout,
		FirmwareImage: "qcom/sdx55m/sbl1.mbn",
		EDLImage:      "qcom/sdx55m/edl.mbn",
	},
	// Telit FN990 / FE990A (mhi_telit_fn990_info, mhi_telit_fe990a_info,
	// §6.3).
	{
		Name:        "telit-fn990",
		Description: "Telit FN990",
		IDs:         []PCIID{pciDevSub(pciVendorQcom, 0x0308, pciSubVendorTelit, 0x2010)},
		Channels:    telitFN990Channels,
		EventRings:  telitFN990EventRings,
		MRU:         32768,
		Timeout:     telitTimeout,
	},
	{
		Name:        "telit-fe990a",
		Description: "Telit FE990A",
		IDs:         []PCIID{pciDevSub(pciVendorQcom, 0x0308, pciSubVendorTelit, 0x2015)},
		Channels:    telitFN990Channels,
		EventRings:  telitFN990EventRings,
		MRU:         32768,
		Timeout:     telitTimeout,
	},
	// Foxconn T99W696: any Foxconn subsystem device on 17cb:0308
	// (mhi_foxconn_t99w696_info, Foxconn SDX61 config, §6.3).
	{
		Name:        "foxconn-t99w696",
		Description: "Foxconn T99W696",
		IDs:         []PCIID{pciDevSubAny(pciVendorQcom, 0x0308, pciVendorFoxconn)},
		Channels:    foxconnSDX61Channels,
		EventRings:  foxconnEventRings,
		MRU:         32768,
		Timeout:     foxconnTimeout,
		EDLImage:    "qcom/sdx61/foxconn/prog_firehose_lite.elf",
		EDLTrigger:  true,
	},
	// Telit FN990B40 / FE990B40 (Telit FN920C04 config, §6.3).
	{
		Name:        "telit-fn990b40",
		Description: "Telit FN990B40",
		IDs:         []PCIID{pciDevSub(pciVendorQcom, 0x0309, pciSubVendorTelit, 0x201a)},
		Channels:    telitFN920C04Channels,
		EventRings:  telitFN990EventRings,
		MRU:         32768,
		Timeout:     telitFN920C04Timeout,
		EDLTrigger:  true,
	},
	{
		Name:        "telit-fe990b40",
		Description: "Telit FE990B40",
		IDs:         []PCIID{pciDevSub(pciVendorQcom, 0x0309, pciSubVendorTelit, 0x2025)},
		Channels:    telitFN920C04Channels,
		EventRings:  telitFN990EventRings,
		MRU:         32768,
		Timeout:     telitFN920C04Timeout,
		EDLTrigger:  true,
	},
	// Telit FN920C04 / FE912C04 (mhi_telit_fn920c04_info, §6.3).
	{
		Name:        "telit-fn920c04",
		Description: "Telit FN920C04",
		IDs:         []PCIID{pciDevSub(pciVendorQcom, 0x011a, pciSubVendorTelit, 0x2020)},
		Channels:    telitFN920C04Channels,
		EventRings:  telitFN990EventRings,
		MRU:         32768,
		Timeout:     telitFN920C04Timeout,
		EDLTrigger:  true,
	},
	{
		Name:        "telit-fe912c04",
		Description: "Telit FE912C04",
		IDs:         []PCIID{pciDevSub(pciVendorQcom, 0x011a, pciSubVendorTelit, 0x2045)},
		Channels:    telitFN920C04Channels,
		EventRings:  telitFN990EventRings,
		MRU:         32768,
		Timeout:     telitFN920C04Timeout,
		EDLTrigger:  true,
	},

	// ---- Qualcomm reference designs: qcom v1 (SDX24/55/65), qcom v2
	// (SDX75/35) — mhi_qcom_sdx*_info, §6.3. ----
	{
		Name:         "qcom-sdx24",
		Description:  "Qualcomm SDX24 reference design",
		IDs:          []PCIID{pciDev(pciVendorQcom, 0x0304)},
		Channels:     qcomV1Channels,
		EventRings:   qcomV1EventRings,
		Timeout:      qcomTimeout,
		EDLImage:     "qcom/prog_firehose_sdx24.mbn",
		SidebandWake: true,
	},
	{
		Name:          "qcom-sdx55m",
		Description:   "Qualcomm SDX55 reference design",
		IDs:           []PCIID{pciDev(pciVendorQcom, 0x0306)},
		Channels:      qcomV1Channels,
		EventRings:    qcomV1EventRings,
		MRU:           32768,
		Timeout:       qcomTimeout,
		FirmwareImage: "qcom/sdx55m/sbl1.mbn",
		EDLImage:      "qcom/sdx55m/edl.mbn",
		EDLTrigger:    true,
	},
	{
		Name:          "qcom-sdx65m",
		Description:   "Qualcomm SDX65 reference design",
		IDs:           []PCIID{pciDev(pciVendorQcom, 0x0308)},
		Channels:      qcomV1Channels,
		EventRings:    qcomV1EventRings,
		Timeout:       qcomTimeout,
		FirmwareImage: "qcom/sdx65m/xbl.elf",
		EDLImage:      "qcom/sdx65m/edl.mbn",
		EDLTrigger:    true,
	},
	{
		Name:          "qcom-sdx75m",
		Description:   "Qualcomm SDX75 reference design",
		IDs:           []PCIID{pciDev(pciVendorQcom, 0x0309)},
		Channels:      qcomV1Channels,
		EventRings:    qcomV1EventRings,
		Timeout:       qcomTimeout,
		ReadyTimeout:  qcomV2ReadyTimeout,
		FirmwareImage: "qcom/sdx75m/xbl.elf",
		EDLImage:      "qcom/sdx75m/edl.mbn",
		EDLTrigger:    true,
	},
	{
		Name:         "qcom-sdx35m",
		Description:  "Qualcomm SDX35 reference design",
		IDs:          []PCIID{pciDev(pciVendorQcom, 0x011a)},
		Channels:     qcomV1Channels,
		EventRings:   qcomV1EventRings,
		MRU:          32768,
		Timeout:      qcomTimeout,
		ReadyTimeout: qcomV2ReadyTimeout,
		EDLTrigger:   true,
	},
	// SA8775P (mhi_qcom_sa8775p_info, §6.2, §6.3).
	{
		Name:        "qcom-sa8775p",
		Description: "Qualcomm SA8775P",
		IDs:         []PCIID{pciDev(pciVendorQcom, 0x0116)},
		Channels:    sa8775pChannels,
		EventRings:  sa8775pEventRings,
		MRU:         32768,
		Timeout:     8000 * time.Millisecond,
	},
	// QDU100 (mhi_qcom_qdu100_info, §6.2, §6.3; timeout_ms 120000).
	{
		Name:          "qcom-qdu100",
		Description:   "Qualcomm QDU100",
		IDs:           []PCIID{pciDev(pciVendorQcom, 0x0601)},
		Channels:      qdu100Channels,
		EventRings:    qdu100EventRings,
		Timeout:       120000 * time.Millisecond,
		FirmwareImage: "qcom/qdu100/xbl_s.melf",
		EDLTrigger:    true,
		NoM3:          true,
		ResetOnRemove: true,
	},

	// ---- Quectel (Quectel EM1xx config, mhi_quectel_em1xx_info /
	// mhi_quectel_rm5xx_info, §6.3). ----
	{
		Name:        "quectel-em1xx",
		Description: "Quectel EM120R-GL / EM160R-GL",
		IDs: []PCIID{
			pciDev(pciVendorQuectel, 0x1001),
			pciDev(pciVendorQuectel, 0x1002),
			pciDev(pciVendorQuectel, 0x100d),
			pciDev(pciVendorQuectel, 0x2001),
		},
		Channels:     quectelEM1xxChannels,
		EventRings:   quectelEM1xxEventRings,
		MRU:          32768,
		Timeout:      quectelTimeout,
		ReadyTimeout: quectelReadyTimeout,
		EDLImage:     "qcom/prog_firehose_sdx24.mbn",
		SidebandWake: true,
		FCCLock:      FCCLock{Unlock: FCCUnlockQuectel, IDs: []PCIID{pciDev(pciVendorQuectel, 0x1001)}},
	},
	{
		Name:         "quectel-rm5xx",
		Description:  "Quectel RM520N-GL",
		IDs:          []PCIID{pciDev(pciVendorQuectel, 0x1004), pciDev(pciVendorQuectel, 0x1007)},
		Channels:     quectelEM1xxChannels,
		EventRings:   quectelEM1xxEventRings,
		MRU:          32768,
		Timeout:      quectelTimeout,
		ReadyTimeout: quectelReadyTimeout,
		EDLImage:     "qcom/prog_firehose_sdx6x.elf",
		SidebandWake: true,
		FCCLock: FCCLock{Unlock: FCCUnlockQuectel,
			IDs: []PCIID{pciDev(pciVendorQuectel, 0x1004), pciDev(pciVendorQuectel, 0x1007)}},
	},

	// ---- Foxconn, own vendor ID (Foxconn SDX55 / SDX61 / SDX72 configs,
	// mhi_foxconn_*_info, §6.3). ----
	{
		Name:        "foxconn-t99w175",
		Description: "Foxconn T99W175 (also HP variant)",
		IDs: []PCIID{
			pciDev(pciVendorFoxconn, 0xe0ab),
			pciDev(pciVendorFoxconn, 0xe0bf),
			pciDev(pciVendorFoxconn, 0xe0c3),
			pciDev(pciVendorHP, 0x0a6c),
		},
		Channels:   foxconnSDX55Channels,
		EventRings: foxconnEventRings,
		MRU:        32768,
		Timeout:    foxconnTimeout,
		EDLImage:   "qcom/sdx55m/foxconn/prog_firehose_sdx55.mbn",
		EDLTrigger: true,
		FCCLock: FCCLock{Unlock: FCCUnlockFoxconn,
			IDs: []PCIID{pciDev(pciVendorFoxconn, 0xe0ab), pciDev(pciVendorFoxconn, 0xe0c3)}},
	},
	{
		Name:        "foxconn-dw5930e",
		Description: "Dell DW5930e (Foxconn T99W175)",
		IDs:         []PCIID{pciDev(pciVendorFoxconn, 0xe0b0), pciDev(pciVendorFoxconn, 0xe0b1)},
		Channels:    foxconnSDX55Channels,
		EventRings:  foxconnEventRings,
		MRU:         32768,
		Timeout:     foxconnTimeout,
		EDLImage:    "qcom/sdx55m/foxconn/prog_firehose_sdx55.mbn",
		EDLTrigger:  true,
	},
	{
		Name:        "foxconn-t99w368",
		Description: "Foxconn T99W368",
		IDs:         []PCIID{pciDev(pciVendorFoxconn, 0xe0d8)},
		Channels:    foxconnSDX55Channels,
		EventRings:  foxconnEventRings,
		MRU:         32768,
		Timeout:     foxconnTimeout,
		EDLImage:    "qcom/sdx65m/foxconn/prog_firehose_lite.elf",
		EDLTrigger:  true,
	},
	{
		Name:        "foxconn-t99w373",
		Description: "Foxconn T99W373",
		IDs:         []PCIID{pciDev(pciVendorFoxconn, 0xe0d9)},
		Channels:    foxconnSDX55Channels,
		EventRings:  foxconnEventRings,
		MRU:         32768,
		Timeout:     foxconnTimeout,
		EDLImage:    "qcom/sdx65m/foxconn/prog_firehose_lite.elf",
		EDLTrigger:  true,
	},
	{
		Name:        "foxconn-t99w510",
		Description: "Foxconn T99W510",
		IDs: []PCIID{
			pciDev(pciVendorFoxconn, 0xe0f0),
			pciDev(pciVendorFoxconn, 0xe0f1),
			pciDev(pciVendorFoxconn, 0xe0f2),
		},
		Channels:   foxconnSDX55Channels,
		EventRings: foxconnEventRings,
		MRU:        32768,
		Timeout:    foxconnTimeout,
		EDLImage:   "qcom/sdx24m/foxconn/prog_firehose_sdx24.mbn",
		EDLTrigger: true,
	},
	{
		Name:        "foxconn-dw5932e",
		Description: "Dell DW5932e (Foxconn)",
		IDs:         []PCIID{pciDev(pciVendorFoxconn, 0xe0f5), pciDev(pciVendorFoxconn, 0xe0f9)},
		Channels:    foxconnSDX55Channels,
		EventRings:  foxconnEventRings,
		MRU:         32768,
		Timeout:     foxconnTimeout,
		EDLImage:    "qcom/sdx65m/foxconn/prog_firehose_lite.elf",
		EDLTrigger:  true,
	},
	// Foxconn SDX72 config: the SDX55 tables + ready_timeout_ms 50000.
	{
		Name:              "foxconn-t99w640",
		Description:       "Foxconn T99W640",
		IDs:               []PCIID{pciDev(pciVendorFoxconn, 0xe118)},
		Channels:          foxconnSDX55Channels,
		EventRings:        foxconnEventRings,
		MRU:               32768,
		Timeout:           foxconnTimeout,
		ReadyTimeout:      foxconnSDX72ReadyTimeout,
		EDLImage:          "qcom/sdx72m/foxconn/edl.mbn",
		EDLTrigger:        true,
		MBIMSessionOffset: foxconnMBIMSessionOffset,
	},
	{
		Name:              "foxconn-dw5934e",
		Description:       "Dell DW5934e (Foxconn)",
		IDs:               []PCIID{pciDev(pciVendorFoxconn, 0xe11d), pciDev(pciVendorFoxconn, 0xe11e)},
		Channels:          foxconnSDX55Channels,
		EventRings:        foxconnEventRings,
		MRU:               32768,
		Timeout:           foxconnTimeout,
		ReadyTimeout:      foxconnSDX72ReadyTimeout,
		EDLImage:          "qcom/sdx72m/foxconn/edl.mbn",
		EDLTrigger:        true,
		MBIMSessionOffset: foxconnMBIMSessionOffset,
	},
	// Foxconn SDX61 config.
	{
		Name:              "foxconn-t99w760",
		Description:       "Foxconn T99W760",
		IDs:               []PCIID{pciDev(pciVendorFoxconn, 0xe123)},
		Channels:          foxconnSDX61Channels,
		EventRings:        foxconnEventRings,
		MRU:               32768,
		Timeout:           foxconnTimeout,
		EDLImage:          "qcom/sdx35/foxconn/xbl_s_devprg_ns.melf",
		EDLTrigger:        true,
		MBIMSessionOffset: foxconnMBIMSessionOffset,
	},

	// ---- Thales/Cinterion (MV3x config, mhi_mv31_info / mhi_mv32_info,
	// §6.3). ----
	{
		Name:        "cinterion-mv31",
		Description: "Cinterion MV31-W",
		IDs:         []PCIID{pciDev(pciVendorThales, 0x00b3), pciDev(pciVendorThales, 0x00b4)},
		Channels:    mv3xChannels,
		EventRings:  mv3xEventRings,
		MRU:         32768,
		Timeout:     mv3xTimeout,
	},
	{
		Name:        "cinterion-mv32",
		Description: "Cinterion MV32-WA / MV32-WB",
		IDs:         []PCIID{pciDev(pciVendorThales, 0x00ba), pciDev(pciVendorThales, 0x00bb)},
		Channels:    mv3xChannels,
		EventRings:  mv3xEventRings,
		MRU:         32768,
		Timeout:     mv3xTimeout,
	},

	// ---- NetPrisma (Quectel EM1xx config, mhi_netprisma_*_info, §6.3). ----
	{
		Name:         "netprisma-lcur57",
		Description:  "NetPrisma LCUR57",
		IDs:          []PCIID{pciDev(pciVendorNetPrisma, 0x1000)},
		Channels:     quectelEM1xxChannels,
		EventRings:   quectelEM1xxEventRings,
		MRU:          32768,
		Timeout:      quectelTimeout,
		ReadyTimeout: quectelReadyTimeout,
		EDLImage:     "qcom/prog_firehose_sdx24.mbn",
		SidebandWake: true,
	},
	{
		Name:         "netprisma-fcun69",
		Description:  "NetPrisma FCUN69",
		IDs:          []PCIID{pciDev(pciVendorNetPrisma, 0x1001)},
		Channels:     quectelEM1xxChannels,
		EventRings:   quectelEM1xxEventRings,
		MRU:          32768,
		Timeout:      quectelTimeout,
		ReadyTimeout: quectelReadyTimeout,
		EDLImage:     "qcom/prog_firehose_sdx6x.elf",
		SidebandWake: true,
	},
}
