// Package sahara is Qualcomm's Sahara boot protocol: the codec both ends
// share and the host's side. A modem's boot ROM (EDL over USB) or its SBL
// (on the MHI SAHARA channels, EE SBL) asks the host for images with
// READ_DATA and, after a crash, offers its RAM as a memory dump.
//
//	conn, _ := pairconn.Open(ctx, ctrl, dev.DMA(), "SAHARA", pairconn.Options{})
//	h := &sahara.Host{Images: map[uint32]string{13: "prog_firehose.elf"}}
//	res, err := h.Run(ctx, conn)
//
// Every length and offset the target writes is checked against the
// command's fixed size, the image and the host's bounds before use; a
// violation is answered with RESET and returned. The emulated modem's
// side (mhi/sim.Sahara) uses the same codec. Packet layouts:
// docs/FLASHING.md, "Sahara" (after Linux drivers/accel/qaic/sahara.c and
// linux-msm/qdl src/sahara.c).
package sahara
