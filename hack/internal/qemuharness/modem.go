package qemuharness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Modem is the emulated modem served over vfio-user (mhictl sim serve) for
// one QEMU run, with its log kept in memory and in a file.
type Modem struct {
	cmd    *exec.Cmd
	done   chan error
	copied chan struct{}
	mu     sync.Mutex
	out    bytes.Buffer
}

// StartModem runs mhictl with args (sim serve …, which must include
// -socket sock), writes its log to logPath, echoes each line to echo when
// it is not nil, and waits until it listens on sock. The modem is killed
// when ctx ends. QEMU must start after this: it connects while it realizes
// the device and never retries.
func StartModem(ctx context.Context, mhictl string, args []string, sock, logPath string, echo func(line string)) (*Modem, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	m := &Modem{done: make(chan error, 1), copied: make(chan struct{})}
	m.cmd = exec.CommandContext(ctx, mhictl, args...)
	pr, pw := io.Pipe()
	m.cmd.Stdout, m.cmd.Stderr = pw, pw
	if err := m.cmd.Start(); err != nil {
		logFile.Close()
		return nil, Prereqf("start %s: %v", mhictl, err)
	}
	go func() { m.done <- m.cmd.Wait(); pw.Close() }()
	go func() {
		defer close(m.copied)
		defer logFile.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			m.mu.Lock()
			m.out.WriteString(line + "\n")
			m.mu.Unlock()
			fmt.Fprintln(logFile, line)
			if echo != nil {
				echo(line)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return m, nil
		}
		select {
		case err := <-m.done:
			m.done <- err
			<-m.copied
			return nil, fmt.Errorf("the modem exited (%v) before listening on %s:\n%s", err, sock, m.Log())
		default:
		}
		if time.Now().After(deadline) {
			m.cmd.Process.Kill()
			m.Stop(0)
			return nil, fmt.Errorf("the modem never listened on %s:\n%s", sock, m.Log())
		}
	}
}

// Signal sends sig to the modem process.
func (m *Modem) Signal(sig syscall.Signal) error { return m.cmd.Process.Signal(sig) }

// Log returns what the modem has logged so far.
func (m *Modem) Log() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.String()
}

// Stop waits up to grace for the modem to exit by itself (with -once it
// does when QEMU disconnects), then sends SIGTERM, then SIGKILL, and
// returns its exit error.
func (m *Modem) Stop(grace time.Duration) error {
	var err error
	select {
	case err = <-m.done:
	case <-time.After(grace):
		m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-m.done:
		case <-time.After(10 * time.Second):
			m.cmd.Process.Kill()
			err = <-m.done
		}
	}
	m.done <- err // Stop may be called again
	<-m.copied
	return err
}
