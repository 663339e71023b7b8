package link

import "sync/atomic"

// Stats are the endpoint's counters since New. Packet counts are IP
// packets; frames are MHI transfers (one per packet with raw IP).
type Stats struct {
	RXPackets, RXBytes uint64 // IP packets handed to the stack (before GRO)
	RXFrames           uint64 // frames completed by the device (after OVERFLOW reassembly)
	// RXErrors counts malformed frames (Framing.Decode errors).
	RXErrors uint64
	// RXSequenceGlitches counts frames whose sequence number
	// (framing.Sequenced: MBIM's wSequence) is not the previous frame's
	// plus one. They are delivered like any other: modems skip and
	// restart the number (docs/QUIRKS.md).
	RXSequenceGlitches uint64
	// RXChecksumDevice counts packets whose TCP/UDP checksum the modem
	// validated (QMAPv5 csum_valid, Span.CsumValid), so the endpoint did
	// not (rmnet's csum_ok).
	RXChecksumDevice uint64
	RXDrops          RXDrops
	// RXAllocFail counts refills that found the DMA pool with fewer
	// buffers than the DL ring had free descriptors (Linux rx_alloc_fail
	// in spirit): the refiller retries with back-off.
	RXAllocFail uint64

	TXPackets, TXBytes uint64 // IP packets queued to the device
	TXFrames           uint64 // UL transfers queued
	TXCompletions      uint64 // UL transfers the device completed
	TXDrops            TXDrops
	// TXFull counts the times a writer found no TX buffer or a full UL
	// ring and had to reap completions inline or wait (backpressure).
	TXFull uint64
	// TXWakeups counts the times a writer waiting for UL space woke up
	// (TX completions freed enough, an interrupt asked it to reap, or
	// its deadline).
	TXWakeups uint64
	// TXDoorbells counts UL doorbell batches (Channel.Ring calls).
	TXDoorbells uint64
	// TXRequeued counts held UL frames queued after the hold ended:
	// frames a SYS_ERR took off the ring before the device sent them,
	// and frames written during a SYS_ERR or while TX was paused
	// (PauseTX), queued after recovery or ResumeTX (requeue.go).
	TXRequeued uint64
	// TXHeld counts the frames written during a SYS_ERR or while TX was
	// paused, held instead of queued (within TXFrames).
	TXHeld uint64
	// TXGSO counts host-GSO segments (GSOSegment) the endpoint cut into
	// more than one packet; TXPackets counts the packets.
	TXGSO uint64

	// Interrupts counts event-ring notifications (MSIs) for the pair.
	Interrupts uint64
	// MissedInterrupts counts the idle checks of the dedicated poller
	// that found events no MSI had announced (a lost MSI; see
	// missedIRQInterval).
	MissedInterrupts uint64
	// DeferredPolls counts passes started by the DeferPoll timer rather
	// than by an interrupt.
	DeferredPolls uint64
	// Polls counts poll passes; BudgetExhausted the passes that did
	// Budget packets of work and so polled again without re-arming;
	// Rearms the times the poller went back to waiting for an
	// interrupt, RearmRaces the re-checks that found work after re-arming.
	Polls, BudgetExhausted, Rearms, RearmRaces uint64
	// InlineHandoffs counts the inline-poll runs (experiment.Options.
	// InlinePoll) that used up their time slice and handed the rest to the
	// poller goroutine.
	InlineHandoffs uint64
	// MaxPassPackets is the most RX packets one pass delivered (never
	// more than Budget).
	MaxPassPackets uint64
	// PollNanos is the time the poller spent inside passes: host cost
	// per packet is PollNanos/RXPackets.
	PollNanos uint64

	// Refills counts refill batches (one doorbell each), RefillBuffers
	// the DL buffers they queued.
	Refills, RefillBuffers uint64
	// GROMerges counts packets GRO merged into another one.
	GROMerges uint64
	// Control counts in-band control frames received (QMAP commands);
	// ControlAnswers the answers (ACKs) queued on UL.
	Control, ControlAnswers uint64
}

// RXDrops counts RX packets or frames dropped, by reason.
type RXDrops struct {
	Oversize    uint64 // OVERFLOW chain longer than MaxFrame or than the chain bound: frame dropped
	Truncated   uint64 // chain cut by a channel reset or SYS_ERR
	Protocol    uint64 // not IPv4/IPv6, or shorter than its IP header
	Checksum    uint64 // bad IPv4 header, TCP or UDP checksum (checksum offload on)
	NotAttached uint64 // no dispatcher attached
	Backlog     uint64 // poller backlog full (should stay 0)
	Session     uint64 // packet of a session no endpoint serves (NewSessionEndpoint)
}

// TXDrops counts TX packets not sent, by reason.
type TXDrops struct {
	TooBig   uint64 // larger than a TX buffer can frame
	Timeout  uint64 // no UL space within Options.TXTimeout (WritePackets; WritePacketsKept's caller keeps them)
	LinkDown uint64 // channel not running (SYS_ERR, removal)
	Closed   uint64 // endpoint closed
	// Held counts the packets of held frames dropped (the device was
	// removed, recovery failed, ResumeTX(false), Close) and packets
	// refused because the whole TX pool was held.
	Held uint64
}

// counters are the atomics behind Stats. The poller accumulates its own
// counts per pass and publishes them once per pass.
type counters struct {
	rxPackets, rxBytes, rxFrames, rxErrors, rxAllocFail    atomic.Uint64
	dropOversize, dropTruncated, dropProto, dropCsum       atomic.Uint64
	dropNotAttached, dropBacklog, dropSession              atomic.Uint64
	control, controlAnswers                                atomic.Uint64
	txPackets, txBytes, txFrames, txCompletions, txFull    atomic.Uint64
	txDoorbells, txGSO, txWakeups                          atomic.Uint64
	txTooBig, txTimeout, txLinkDown, txClosed              atomic.Uint64
	txRequeued, txHeld, txHeldDrops                        atomic.Uint64
	interrupts, polls, exhausted, rearms, rearmRaces       atomic.Uint64
	maxPass, pollNanos, refills, refillBuffers, groMerges  atomic.Uint64
	missedIRQ, deferredPolls, rxCsumDevice, inlineHandoffs atomic.Uint64
	rxSeqGlitches                                          atomic.Uint64
}

// passCounts is what one poll pass counted.
type passCounts struct {
	rxPackets, rxBytes, rxFrames, rxErrors                      uint64
	dropOversize, dropTruncated, dropProto, dropCsum, dropNoAtt uint64
	dropBacklog, groIn, groOut, dropSession, control            uint64
	rxCsumDevice, rxSeqGlitches                                 uint64
}

func (c *counters) publish(p *passCounts) {
	add := func(a *atomic.Uint64, v uint64) {
		if v != 0 {
			a.Add(v)
		}
	}
	add(&c.rxPackets, p.rxPackets)
	add(&c.rxBytes, p.rxBytes)
	add(&c.rxFrames, p.rxFrames)
	add(&c.rxErrors, p.rxErrors)
	add(&c.dropOversize, p.dropOversize)
	add(&c.dropTruncated, p.dropTruncated)
	add(&c.dropProto, p.dropProto)
	add(&c.dropCsum, p.dropCsum)
	add(&c.dropNotAttached, p.dropNoAtt)
	add(&c.dropBacklog, p.dropBacklog)
	add(&c.dropSession, p.dropSession)
	add(&c.control, p.control)
	add(&c.rxCsumDevice, p.rxCsumDevice)
	add(&c.rxSeqGlitches, p.rxSeqGlitches)
	if p.groIn > p.groOut {
		// Packets GRO holds at the end of a pass are flushed in it, so
		// in − out is what it merged.
		c.groMerges.Add(p.groIn - p.groOut)
	}
	*p = passCounts{}
}

// Stats returns a snapshot of the counters.
func (e *Endpoint) Stats() Stats {
	c := &e.stats
	return Stats{
		RXPackets: c.rxPackets.Load(), RXBytes: c.rxBytes.Load(), RXFrames: c.rxFrames.Load(),
		RXErrors: c.rxErrors.Load(), RXSequenceGlitches: c.rxSeqGlitches.Load(), RXAllocFail: c.rxAllocFail.Load(), RXChecksumDevice: c.rxCsumDevice.Load(),
		RXDrops: RXDrops{
			Oversize: c.dropOversize.Load(), Truncated: c.dropTruncated.Load(),
			Protocol: c.dropProto.Load(), Checksum: c.dropCsum.Load(),
			NotAttached: c.dropNotAttached.Load(), Backlog: c.dropBacklog.Load(),
			Session: c.dropSession.Load(),
		},
		TXPackets: c.txPackets.Load(), TXBytes: c.txBytes.Load(), TXFrames: c.txFrames.Load(),
		TXCompletions: c.txCompletions.Load(), TXFull: c.txFull.Load(), TXDoorbells: c.txDoorbells.Load(), TXRequeued: c.txRequeued.Load(), TXHeld: c.txHeld.Load(),
		TXGSO: c.txGSO.Load(), TXWakeups: c.txWakeups.Load(),
		TXDrops: TXDrops{
			TooBig: c.txTooBig.Load(), Timeout: c.txTimeout.Load(),
			LinkDown: c.txLinkDown.Load(), Closed: c.txClosed.Load(), Held: c.txHeldDrops.Load(),
		},
		Interrupts: c.interrupts.Load(), MissedInterrupts: c.missedIRQ.Load(), DeferredPolls: c.deferredPolls.Load(), Polls: c.polls.Load(), BudgetExhausted: c.exhausted.Load(),
		Rearms: c.rearms.Load(), RearmRaces: c.rearmRaces.Load(), MaxPassPackets: c.maxPass.Load(),
		InlineHandoffs: c.inlineHandoffs.Load(),
		PollNanos:      c.pollNanos.Load(), Refills: c.refills.Load(), RefillBuffers: c.refillBuffers.Load(),
		GROMerges: c.groMerges.Load(),
		Control:   c.control.Load(), ControlAnswers: c.controlAnswers.Load(),
	}
}
