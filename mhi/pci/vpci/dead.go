package vpci

// Death is how a function that died silently answers (SetDead): no AER,
// no interrupt, only reads that no longer make sense. The flags combine.
type Death uint32

const (
	// DeadConfigOnes: config reads return all-ones (vendor ID 0xFFFF)
	// and config writes are lost, as when the link is down or the card
	// was pulled without a hotplug notification.
	DeadConfigOnes Death = 1 << iota
	// DeadConfigZero: config reads return zero (vendor ID 0) and config
	// writes are lost, as a function whose PCIe core hangs.
	DeadConfigZero
	// DeadBAR: BAR reads return all-ones and BAR writes are lost. Without
	// it the registers keep answering, so that a test can tell a check of
	// config space from one of MMIO.
	DeadBAR
	// DeadUntilReset: a function-level reset (Reset) revives the
	// function. Without it the death outlasts resets.
	DeadUntilReset
)

// SetDead makes the function die silently as d says (0 revives it). The
// model behind it keeps running, unaware; DMA and MSIs are not affected
// (Remove takes the whole function off the bus). It is a test hook for
// host health checks such as Linux pci_generic's, which reads the vendor
// ID every two seconds (drivers/bus/mhi/host/pci_generic.c,
// mhi_pci_health_check).
func (d *Device) SetDead(how Death) { d.dead.Store(uint32(how)) }

// death returns the current SetDead flags.
func (d *Device) death() Death { return Death(d.dead.Load()) }

// configDead reports whether config space answers nothing sensible, and
// the byte every read returns then.
func (d *Device) configDead() (fill byte, dead bool) {
	switch how := d.death(); {
	case d.removed.Load(), how&DeadConfigOnes != 0:
		return 0xFF, true
	case how&DeadConfigZero != 0:
		return 0, true
	}
	return 0, false
}
