package main

import (
	"context"
	"sync"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/mhistack/mhistack/link/radio"
)

// radioPairEnv is table 10's plain gVisor pair: two package stacks on
// channel.Endpoints (MTU 1500, no GSO, as internal/chanpair) whose
// packets cross one link/radio model of cfg instead of a pump's copy.
// The stack that dials is the device's: what it sends goes radio.Up,
// what the listening stack sends goes radio.Down. There is no modem, so
// this is what gVisor's TCP gets from the model alone.
func radioPairEnv(cfg radio.Config) (*altEnv, error) {
	a, b := channel.New(1024, 1500, ""), channel.New(1024, 1500, "")
	l, err := radio.New(cfg, inject(a), inject(b))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go radioPump(ctx, &wg, a, l, radio.Up)
	go radioPump(ctx, &wg, b, l, radio.Down)
	return stackPairEnv(a, b, func() { cancel(); wg.Wait(); l.Close() })
}

// radioPump sends from's outbound packets into direction d of l.
func radioPump(ctx context.Context, wg *sync.WaitGroup, from *channel.Endpoint, l *radio.Link, d radio.Dir) {
	defer wg.Done()
	for {
		pkt := from.ReadContext(ctx)
		if pkt == nil {
			return
		}
		v := pkt.ToView()
		_ = l.Send(d, uint32(pkt.NetworkProtocolNumber), v.AsSlice())
		v.Release()
		pkt.DecRef()
	}
}

// inject is the model's delivery into to: a copy of the packet, inbound.
func inject(to *channel.Endpoint) radio.Deliver {
	return func(proto uint32, p []byte) {
		pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(p)})
		to.InjectInbound(tcpip.NetworkProtocolNumber(proto), pkt)
		pkt.DecRef()
	}
}
