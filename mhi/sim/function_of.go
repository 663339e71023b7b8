package sim

// Function returns the function Options.Functions attached to the channel
// pair named pair (nil if none), for tests that did not build the modem
// themselves: stack.Open attaches a *simnet.MBIMFunction to "MBIM"
// and a *simnet.CarrierNetwork to its data pair.
func (m *Modem) Function(pair string) Function { return m.opts.Functions[pair] }
