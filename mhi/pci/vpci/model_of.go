package vpci

// Model returns the device model behind d (a *sim.Modem for the emulated
// modem), for tests that reach the device through a host object that only
// hands out its pci.Device: an mhi.Controller from stack.Open, say.
func (d *Device) Model() Model { return d.model }
