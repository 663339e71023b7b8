package mhi

import "time"

// The modem table (mhi-protocol.md §6.2, §6.3; Linux
// drivers/bus/mhi/host/pci_generic.c). Order matters: entries with
// subsystem IDs come before the plain Qualcomm IDs they refine.

// qcomV1Channels is the "qcom v1" channel set (SDX24/55/65).
var qcomV1Channels = channels(
	pair(4, "DIAG", 16, 1, 1, eeAMSS),
	pair(12, "MBIM", 4, 0, 0, eeAMSS),
	pair(14, "QMI", 4, 0, 0, eeAMSS),
	pair(20, "IPCR", 8, 0, 0, eeAMSS),
	pair(34, "FIREHOSE", 32, 0, 0, eeFP),
	pair(46, "IP_SW0", 64, 2, 3, eeAMSS),
	hwPair(100, "IP_HW0", 128, 4, 5),
)

var qcomV1EventRings = []EventRingConfig{
	ctrlRing(64), dataRing(128), swDataRing(64), swDataRing(64), hwRing(1024, 100), hwRing(2048, 101),
}

var profiles = []*Profile{
	{
		Name:          "qcom-sdx55m",
		Description:   "Qualcomm SDX55 reference design",
		IDs:           []PCIID{{Vendor: 0x17cb, Device: 0x0306}},
		Channels:      qcomV1Channels,
		EventRings:    qcomV1EventRings,
		MRU:           32768,
		Timeout:       8000 * time.Millisecond,
		FirmwareImage: "qcom/sdx55m/sbl1.mbn",
		EDLImage:      "qcom/sdx55m/edl.mbn",
		EDLTrigger:    true,
	},
}
