// Package radio is a model of a cellular radio link: for each direction a
// packet delay line with a bottleneck rate (constant or following a
// trace), a bounded queue (drop-tail or CoDel), a one-way delay with
// jitter, random and bursty loss, reordering, handover gaps and the RRC
// promotion delay after an idle time. It knows only bytes and a clock, so
// the emulated modem's carrier network (link/simnet) and a Linux
// reference between two network namespaces can run the same model.
//
// A user picks a Config (a named preset or a file), gives New one
// callback per direction, and sends packets into a direction:
//
//	cfg, _ := radio.Preset("lte")
//	l, _ := radio.New(cfg, deliverDown, deliverUp)
//	l.Send(radio.Down, tag, pkt) // pkt is copied; deliverDown gets it later
//	defer l.Close()
//
// Each direction has one goroutine, owned by the Link and stopped by
// Close, that hands packets to that direction's callback when their time
// has come; the callback runs on it with no lock held. Send may be called
// from any goroutine. Packets are copied into pooled buffers, so a link
// in steady state does not allocate per packet. Every random draw comes
// from a generator seeded by Config.Seed: the same packets sent at the
// same times meet the same fate. docs/RADIO.md describes each knob and
// the presets with their sources.
package radio
