package qemuharness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// QMP runs one command on QEMU's QMP monitor at the UNIX socket path
// (Machine.QMP): it negotiates capabilities, sends the command and returns
// its "return" value, skipping asynchronous events.
func QMP(path, command string, args any, timeout time.Duration) (json.RawMessage, error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	r := bufio.NewReader(c)
	type reply struct {
		QMP    json.RawMessage `json:"QMP"`
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
		Event string `json:"event"`
	}
	read := func() (reply, error) {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return reply{}, err
			}
			var m reply
			if err := json.Unmarshal(line, &m); err != nil {
				return reply{}, fmt.Errorf("qmp: %q: %w", line, err)
			}
			if m.Event != "" || m.QMP != nil {
				continue
			}
			if m.Error != nil {
				return m, fmt.Errorf("qmp: %s: %s", m.Error.Class, m.Error.Desc)
			}
			return m, nil
		}
	}
	send := func(cmd string, args any) error {
		req := map[string]any{"execute": cmd}
		if args != nil {
			req["arguments"] = args
		}
		b, _ := json.Marshal(req)
		_, err := c.Write(append(b, '\n'))
		return err
	}
	if err := send("qmp_capabilities", nil); err != nil {
		return nil, err
	}
	if _, err := read(); err != nil {
		return nil, err
	}
	if err := send(command, args); err != nil {
		return nil, err
	}
	m, err := read()
	return m.Return, err
}
