// Package simnet is the network side of the emulated modem: what runs
// behind mhi/sim's data and control channels once the MHI device model has
// carried a transfer across. mhi/sim is the modem's MHI hardware and
// firmware (registers, rings, events, power states, boot); simnet is the
// modem's cellular side, plugged into it as sim.Function values, one per
// channel pair (sim.Options.Functions):
//
//   - CarrierNetwork: a gVisor stack that terminates the host's TCP and UDP
//     flows on the data pair and forwards them to the host's own sockets,
//     answers DNS and pings, and aggregates DL like a modem. Its files:
//     carrier.go (options, start, stats, Dial, Close), carrier_ul.go (UL
//     transfers into gVisor through GRO, checksums), carrier_link.go (the
//     carrier stack's NIC, which writes DL), carrier_dlagg.go (DL
//     aggregation on a framed pair and its sender goroutine),
//     carrier_routes.go (which session a DL packet goes on),
//     carrier_forward.go and carrier_relay.go (flows to the host's
//     sockets), carrier_timewait.go, carrier_dns.go (and DNS64),
//     carrier_nat64.go (the NAT64 of an IPv6-only APN, over link/siit),
//     carrier_ra.go (the network's Router Advertisements on the data pair,
//     with CarrierOptions.Network);
//   - MBIMFunction and QMIFunction: the control functions on the "MBIM"
//     and "QMI" pairs (mbim*.go, qmi.go), over one Network (SIM, radio,
//     registration, packet service, APNs and carrier; network.go; its
//     IPv6 router and renumbering, ra.go);
//   - ICMPResponder and PacketNet: the small networks of the kernel
//     cross-check and of framing tests (icmp.go, packetnet.go).
//
// The data pair's framing is a link/framing value, the same the host's
// link endpoint uses: raw IP (nil or framing.RawIP{}), mbim.NTB{} or
// qmap.Framing{Version: 1 or 5}. UL frames are parsed with those codecs,
// strictly (a malformed one is a host protocol violation, reported with
// sim.Port.Violation), and DL frames are built with them (Framer,
// framer.go; the carrier's DL aggregation, carrier_dlagg.go).
//
// The package sits on the link floor (docs/ARCHITECTURE.md): it speaks the
// wire formats of link/framing, link/mbim, link/qmap and link/qmi, so it
// cannot live under mhi/, which imports nothing of link/. No non-test
// package under link/ imports it; stack imports it for Device "sim".
//
//	cn, _ := simnet.NewCarrierNetwork(simnet.CarrierOptions{Framing: mbim.NTB{}})
//	defer cn.Close()
//	dev, _, _ := sim.NewDevice(profile, sim.Options{
//		Functions: map[string]sim.Function{mhi.ChannelIPHW0MBIM: cn, mhi.ChannelMBIM: simnet.NewMBIMFunction(simnet.MBIMConfig{Network: simnet.NewNetwork(simnet.NetworkConfig{})})},
//	})
package simnet
