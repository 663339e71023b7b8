// Package qmi speaks Qualcomm MSM Interface to a modem over its "QMI"
// control channel pair (14/15 on MHI): QMUX framing, the QMI message
// header, TLVs and result codes (message.go, errors.go), the messages of
// the CTL, DMS, NAS, UIM, WDS and WDA services a data session needs
// (one file per service: ctl.go, dms.go, nas.go, uim.go, wds.go, wda.go,
// each with its message IDs, their names and their codecs; services.go
// names the services), a client that allocates client IDs and matches
// transactions (client.go), and a data-session bring-up in the order
// libqmi and ModemManager use (session.go): WDA Set Data Format (raw IP,
// QMAP aggregation) → WDS Bind Mux Data Port → WDS Start Network → WDS
// Get Current Settings.
//
// The codec (Parse, Decoder, Message.Append and the Parse*/TLVs/Request
// functions of each message) is pure: no I/O, never a panic on device
// input, every length checked; the fuzz targets in fuzz_test.go cover
// each decoder.
//
// Wire formats follow libqmi's data definitions
// (data/qmi-service-{ctl,dms,nas,uim,wds,wda}.json, src/libqmi-glib/
// qmi-message.c, qmi-errors.h, qmi-enums-*.h); docs/QMI.md describes them
// in this project's words. No code was taken from libqmi.
package qmi
