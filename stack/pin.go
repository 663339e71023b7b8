package stack

// The SIM codes a user gives: where commands read them from and what
// OpenModem accepts (docs/GETTING-ONLINE.md, "SIM PIN").

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// checkCode validates a PIN (4–8 digits) or PUK (8 digits), the lengths
// of ETSI TS 102 221's PIN and unblock PIN, without repeating it.
func checkCode(name, v string, min, max int) error {
	if v == "" {
		return nil
	}
	ok := len(v) >= min && len(v) <= max
	for i := 0; i < len(v) && ok; i++ {
		ok = v[i] >= '0' && v[i] <= '9'
	}
	if !ok {
		if min == max {
			return fmt.Errorf("stack: Options.%s must be %d digits", name, min)
		}
		return fmt.Errorf("stack: Options.%s must be %d to %d digits", name, min, max)
	}
	return nil
}

// ReadPIN returns the SIM PIN a command was given: flag (-pin) if set,
// else the first line of file (-pin-file) if set, else the PINEnv
// environment variable. Giving both flag and file is an error. The PIN
// is never part of an error.
func ReadPIN(flag, file string) (string, error) {
	switch {
	case flag != "" && file != "":
		return "", errors.New("give the PIN with -pin or -pin-file, not both")
	case flag != "":
		return flag, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("-pin-file: %w", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		pin := strings.TrimSpace(line)
		if pin == "" {
			return "", fmt.Errorf("-pin-file %s: empty", file)
		}
		return pin, nil
	}
	return os.Getenv(PINEnv), nil
}
