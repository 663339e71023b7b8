// Package link is the network interface of an MHI modem: a gVisor
// stack.LinkEndpoint (and stack.GSOEndpoint) over one MHI data channel pair,
// driven NAPI style. It moves IP packets between the gVisor stack and the
// modem's rings, through a Framing (raw IP here; QMAP and MBIM NTB in
// link/qmap and link/mbim).
//
// A user with a controller in mission mode makes the endpoint and hands it
// to a gVisor stack:
//
//	ep, err := link.New(ctx, ctrl, link.Options{Channel: mhi.ChannelIPHW0})
//	err = s.CreateNIC(1, ep)                  // gVisor calls ep.Attach
//	defer func() { s.RemoveNIC(1); ep.Close() }()
//
// # Goroutines
//
// The controller's MSI goroutines only call the endpoint's notify
// function, which sets the "scheduled" bit and wakes the poller
// (napi_schedule). The endpoint owns two goroutines, both stopped by Close:
//
//   - The poller (threaded NAPI). One pass:
//     drain the UL event ring and free TX buffers (outside the budget:
//     TX liberation is cheap and frees what writers wait for; on an event
//     ring that UL and DL share only DL events are charged); deliver up
//     to Budget RX packets, polling the DL event ring once; feed each
//     packet, copied once out of DMA memory into a gVisor buffer, to
//     gVisor's GRO; flush GRO once; return the DMA buffers to the pool in
//     one batch; wake the refiller if the DL ring has a quarter of its
//     descriptors free. A pass that used its whole budget is followed by
//     another without sleeping (with 1 ms interrupt moderation the next
//     MSI may be a millisecond away), yielding the P only when the pass
//     woke the refiller or the poller has run for a slice (yieldSlice,
//     100 µs); otherwise the poller clears
//     "scheduled", re-checks both rings for events that raced in, and
//     sleeps.
//     With experiment.Options.InlinePoll passes run on the interrupt
//     goroutine instead (softirq NAPI); one that keeps exhausting the budget for
//     2 ms or 10 passes hands the rest to the poller goroutine, which then
//     plays ksoftirqd, so that control events on a shared vector still
//     run.
//   - The refiller (like Linux's mhi-net-rx thread): woken at the refill
//     level, it queues MRU-sized buffers from a fixed DMA pool into every
//     free DL descriptor (the channel's FreeCount is the truth) with one
//     doorbell. When the pool is short it counts RXAllocFail and retries
//     with back-off.
//
// WritePackets runs on whatever goroutine gVisor calls it from — TCP
// processors, user goroutines, timers, and the poller itself (ICMP echo
// replies, RSTs sent from inside delivery). It frames packets into TX DMA
// buffers (the one TX copy), queues them and rings the doorbell once per
// call. When TX buffers or UL ring slots run out it reaps UL completions
// itself and sleeps, up to TXTimeout, until a batch of TX completions frees
// buffers (netif_stop_queue / netif_wake_queue: the writer has no timer of
// its own); a UL interrupt during a running pass wakes it to reap itself,
// so a poller that writes cannot deadlock. While writers are stopped the
// poller polls deferred (DeferPoll, backing off to 1 ms when a pass frees
// nothing) instead of waiting for the UL ring's interrupt: the device
// posts completions at once but moderates their MSI (BEI, INTMODT 1 ms),
// and the ring would sit empty meanwhile. It fails with
// tcpip.ErrNoBufferSpace rather than dropping silently. That wait is a
// driver's stopped queue: give the NIC a queueing discipline (gVisor's
// fifo, as package stack does) so that it runs on the queue's goroutine,
// not on TCP goroutines shared by many connections nor on the poller,
// which must keep draining the DL ring meanwhile.
//
// A frame may carry many packets (aggregation): the frame is decoded once
// and its packets are delivered over as many passes as the budget needs, so
// no pass exceeds the budget. An inbound transfer larger than the MRU
// arrives as an OVERFLOW chain, reassembled up to MaxFrame bytes; longer
// chains are discarded piece by piece as they arrive and counted.
//
// # Options
//
// The zero Options are the design: Budget 64 (NAPI_POLL_WEIGHT), deferred
// polling (DeferPoll and DeferCount: poll again shortly after a busy pass
// instead of waiting for the modem's moderated interrupt, like Linux's
// gro_flush_timeout), the channel's MRU. GRO, RX checksum offload (the
// endpoint validates IPv4/TCP/UDP checksums once, or trusts the modem's
// QMAPv5 csum_valid for TCP/UDP, and tells gVisor so) and GSO are on: the
// endpoint advertises host GSO and cuts TCP's 64 KiB segments into
// MSS-sized packets itself while copying them into DMA (Options.GSO;
// GSOGVisor lets TCP split them instead). The alternatives argued in the
// Linux netdev threads behind this design (TX completions in the budget,
// shared or inline refill, the refill level, polling on the interrupt
// goroutine) are switches in package link/experiment, reached through
// Options.Experiments, so that hack/bench and BenchmarkRXOptions can
// measure them; a user leaves it nil. See docs/LINK.md for the
// measurements.
//
// SetTap writes both directions to a pcap file (link type RAW) for
// tcpdump, tshark or Wireshark; Tap is also the writer behind
// stack.Stack.CapturePcap. Stats returns the counters.
package link
