package pci

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// EventVector is a Vector backed by a non-blocking eventfd registered with
// the Go netpoller: a goroutine blocked in Wait holds no OS thread. The
// eventfd can be handed to the kernel (VFIO_DEVICE_SET_IRQS) or to another
// process (vfio-user), or written by an in-process device model.
type EventVector struct {
	index int
	f     *os.File
	fd    int
}

// NewEventVector creates an eventfd-backed vector with the given index.
func NewEventVector(index int) (*EventVector, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pci: eventfd for vector %d: %w", index, err)
	}
	return &EventVector{index: index, fd: fd, f: os.NewFile(uintptr(fd), fmt.Sprintf("msi%d", index))}, nil
}

// Index returns the vector number.
func (v *EventVector) Index() int { return v.index }

// Fd returns the eventfd, valid until Close.
func (v *EventVector) Fd() int { return v.fd }

// Wait blocks until the eventfd is signalled and returns its counter.
func (v *EventVector) Wait() (uint64, error) {
	var b [8]byte
	n, err := v.f.Read(b[:])
	if err != nil {
		if errors.Is(err, os.ErrClosed) {
			return 0, ErrClosed
		}
		return 0, fmt.Errorf("pci: vector %d: %w", v.index, err)
	}
	if n != 8 {
		return 0, fmt.Errorf("pci: vector %d: short eventfd read (%d bytes)", v.index, n)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Trigger adds one to the eventfd counter.
func (v *EventVector) Trigger() error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1)
	// Through the os.File, not the raw fd: after Close the number may
	// belong to another file.
	if _, err := v.f.Write(b[:]); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("pci: trigger vector %d: %w", v.index, err)
	}
	return nil
}

// Close releases the eventfd; a blocked Wait returns ErrClosed.
func (v *EventVector) Close() error { return v.f.Close() }
