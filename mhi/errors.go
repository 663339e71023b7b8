package mhi

import (
	"errors"
	"fmt"
	"syscall"
)

// Sentinel errors; every error the engine returns wraps one of these (or
// a pci error) and names the device and channel.
var (
	// ErrTimeout: the device did not answer within the profile's timeout.
	ErrTimeout = errors.New("mhi: timeout")
	// ErrSysErr: the device entered SYS_ERR; recovery is under way or failed.
	ErrSysErr = errors.New("mhi: device in SYS_ERR")
	// ErrRemoved: the device no longer answers (registers read all-ones).
	ErrRemoved = errors.New("mhi: device removed")
	// ErrRingFull: no free TRE on the channel ring; retry after completions.
	ErrRingFull = errors.New("mhi: ring full")
	// ErrNotRunning: the channel is not started (or was reset by recovery).
	ErrNotRunning = errors.New("mhi: channel not running")
	// ErrClosed: the controller is closed.
	ErrClosed = errors.New("mhi: controller closed")
	// ErrState: the operation is not allowed in the current state.
	ErrState = errors.New("mhi: wrong state")
	// ErrProtocol: the device sent something the protocol forbids.
	ErrProtocol = errors.New("mhi: protocol error")
	// ErrFirmware: a BHI/BHIe download failed.
	ErrFirmware = errors.New("mhi: firmware download failed")
	// ErrBusy: Suspend found UL transfers the device has not completed
	// (Linux mhi_pm_suspend's -EBUSY); the device stays in M0, retry
	// later. It wraps syscall.EBUSY.
	ErrBusy = fmt.Errorf("mhi: transfers pending: %w", syscall.EBUSY)
	// ErrCrashLoop: the firmware crashed Options.CrashLoopLimit times
	// within Options.CrashLoopWindow and the controller stopped
	// recovering it (crashloop.go); the modem likely needs a firmware
	// flash. It wraps ErrSysErr.
	ErrCrashLoop = fmt.Errorf("mhi: firmware crash loop: %w", ErrSysErr)
)
