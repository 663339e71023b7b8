// Package firehose is Qualcomm's Firehose flashing protocol: the XML
// codec both ends share, the host's client (configure, program, read,
// erase, patch, getstorageinfo, setbootablestoragedrive, power), the
// rawprogram*.xml / patch*.xml formats and the expressions in them, and
// Flash, which writes such a set. The flash programmer a modem runs in
// EE FP answers on the FIREHOSE channels (34/35).
//
//	conn, _ := pairconn.Open(ctx, ctrl, dev.DMA(), "FIREHOSE", pairconn.Options{})
//	c := firehose.NewClient(conn, firehose.Options{OnLog: log.Println})
//	cfg, err := c.Configure(ctx, firehose.MemoryUFS)
//	sum, err := firehose.Flash(ctx, c, programs, patches, firehose.FlashOptions{Dir: dir})
//
// Every wait for the target is bounded (Options' timeouts); a NAK is an
// error wrapping ErrNAK that carries the target's log lines as the reason.
// What the target writes is untrusted: documents are bounded in size and
// element count, raw reads end at exactly the bytes asked for. The
// emulated programmer (mhi/sim.Firehose) uses the same codec. Protocol
// mapping and sources: docs/FLASHING.md.
package firehose
