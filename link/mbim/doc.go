// Package mbim speaks the Mobile Broadband Interface Model to a modem:
// today the control plane (messages, fragments, transactions, the
// BASIC_CONNECT service, a data-session state machine and a libmbim
// compatible mbim-proxy endpoint) and the NTB16/NTB32 data framing of
// the same specification (ntb.go).
//
// Data framing: NTB is the framing.Framing of the IP_HW0_MBIM channel
// (link.Options{Channel: mhi.ChannelIPHW0MBIM, Framing: mbim.NTB{}}). DecodeNTB
// reads NTB16 and NTB32 with any number of NDPs, reporting each
// datagram's IP session; NTBBuilder writes mhi_wwan_mbim's one datagram
// per NTB16 or, with NTB.MaxDatagrams, aggregates (docs/FRAMING.md §3).
//
// A host brings a session up in three calls:
//
//	client, err := mbim.DialMHI(ctx, controller, mbim.Options{}) // OPEN on the "MBIM" channels 12/13
//	sess := mbim.NewSession(client, mbim.SessionConfig{APN: "internet"})
//	ipcfg, err := sess.WaitUp(ctx) // SIM → radio → registered → attached → CONNECT → IP_CONFIGURATION
//
// Lower down, NewClient runs the transaction engine over any Transport
// (an mhi.ControlPort, a pipe, a socket) and Client.Command sends one
// COMMAND; the typed calls (DeviceCaps, Connect, IPConfiguration, …)
// encode and decode the information buffers of docs/FRAMING.md §2.8.
// The session agrees on Microsoft's MBIMEx 3.0 or 2.0 where the modem has
// it (NegotiateMBIMEx, ms_extensions.go), which gives SignalState RSRP and
// SNR per RAT, and BaseStationsInfo reads the LTE serving cell and, with
// 3.0, the NR ones (base_stations.go).
// Proxy serves the abstract unix socket "mbim-proxy" so that unmodified
// mbimcli -p and ModemManager share the modem with this process.
//
// The codec functions (Decoder, Message.Append, Parse*/Encode of every
// CID) are pure and never panic on device input; the fuzz targets in
// fuzz_test.go cover each of them.
//
// Wire formats follow the MBIM 1.0 specification as implemented by
// libmbim (src/libmbim-glib/mbim-message.c, mbim-device.c, mbim-proxy.c,
// mbim-cid.h, mbim-errors.h, data/mbim-service-basic-connect.json) and
// summarised in docs/FRAMING.md §2 and §6; no code was taken
// from libmbim.
//
// Section numbers (§N.N) that name no document refer to docs/FRAMING.md;
// the MBIM 1.0 specification and 3GPP sections are named as such.
package mbim
