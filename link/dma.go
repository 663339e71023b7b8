package link

import (
	"fmt"

	"github.com/mhistack/mhistack/link/framing"
	"github.com/mhistack/mhistack/mhi"
)

// DMASize returns an upper bound of the DMA memory, in bytes, an
// Endpoint made with o on a controller for p allocates: the fixed RX pool
// (Options.RXBuffers buffers of the MRU) and the TX buffers (Options.
// TXBuffers of Options.TXBufferSize), each counted with its alignment
// padding (mhi.DMAFootprint). The channel rings are the engine's
// (mhi.DMASize). An MTU of 0 counts DefaultMTU: a caller that lets the
// data session choose the MTU later must pass the largest it accepts.
func DMASize(p *mhi.Profile, o Options) (int, error) {
	ch := o.Channel
	if ch == "" {
		ch = DefaultChannel
	}
	ul, dl, ok := p.ChannelPair(ch)
	if !ok {
		return 0, fmt.Errorf("link: profile %s has no %s channel pair", p.Name, ch)
	}
	mru := p.ChannelMRU(o.MRU)
	if mru > mhi.MaxTRELen {
		return 0, fmt.Errorf("link: MRU %d over the %d-byte TRE limit", mru, mhi.MaxTRELen)
	}
	budget := o.Budget
	if budget <= 0 {
		budget = DefaultBudget
	}
	nrx, _ := rxBuffers(o, dl.Elements, budget, mru)
	mtu := o.MTU
	if mtu == 0 {
		mtu = DefaultMTU
	}
	f := o.Framing
	if f == nil {
		f = framing.RawIP{}
	}
	ntx := txBuffers(o, ul.Elements)
	return nrx*mhi.DMAFootprint(mru, 64) + ntx*mhi.DMAFootprint(txBufferSize(o, mtu, f.Overhead()), 64), nil
}

// rxBuffers returns the RX pool size (Options.RXBuffers, by default the
// DL ring, plus one budget of frames in flight, plus one OVERFLOW chain)
// and the chain bound: a frame of MaxFrame bytes in MRU-sized pieces.
func rxBuffers(o Options, dlElements, budget, mru int) (n, maxPieces int) {
	maxPieces = (framing.MaxFrame+mru-1)/mru + 1
	n = o.RXBuffers
	if n <= 0 {
		n = dlElements - 1 + budget + maxPieces
	}
	return n, maxPieces
}

// txBuffers returns the number of TX buffers: Options.TXBuffers, by
// default one per UL ring slot.
func txBuffers(o Options, ulElements int) int {
	if o.TXBuffers > 0 {
		return o.TXBuffers
	}
	return ulElements - 1
}

// txBufferSize returns the size of a TX buffer: Options.TXBufferSize, by
// default MTU plus the framing's overhead or, if larger, the framing's UL
// frame size (framing.Aggregating), in whole cache lines, at most a TRE.
func txBufferSize(o Options, mtu uint32, overhead int) int {
	size := o.TXBufferSize
	if size <= 0 {
		size = int(mtu) + overhead
		// An aggregating framing gets buffers as large as the
		// modem's UL frames, so that a batch shares frames.
		if a, ok := o.Framing.(framing.Aggregating); ok {
			size = max(size, a.ULFrameBytes())
		}
	}
	return min((size+63)&^63, mhi.MaxTRELen)
}
