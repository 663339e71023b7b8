package main

import (
	"io"
	"strings"
	"testing"
)

// mhiproxy refuses to be an open proxy: any -listen that is not loopback
// only needs -auth.
func TestNonLoopbackListenRequiresAuth(t *testing.T) {
	for _, tc := range []struct {
		listen string
		open   bool // allowed without -auth
	}{
		{"127.0.0.1:1080", true},
		{"127.0.0.2:1080", true},
		{"[::1]:1080", true},
		{"localhost:1080", true},
		{"0.0.0.0:1080", false},
		{":1080", false},
		{"[::]:1080", false},
		{"192.168.1.5:1080", false},
		{"[2001:db8::1]:1080", false},
		{"[::ffff:192.168.1.5]:1080", false},
		{"proxy.example:1080", false}, // a name may resolve to anything
	} {
		_, err := parseFlags([]string{"-listen", tc.listen}, io.Discard)
		if tc.open && err != nil {
			t.Errorf("-listen %s: %v", tc.listen, err)
		}
		if !tc.open && (err == nil || !strings.Contains(err.Error(), "refusing to run an open proxy")) {
			t.Errorf("-listen %s without -auth: %v, want a refusal", tc.listen, err)
		}
		if !tc.open {
			for _, auth := range []string{"user:pass", "random"} {
				if _, err := parseFlags([]string{"-listen", tc.listen, "-auth", auth}, io.Discard); err != nil {
					t.Errorf("-listen %s -auth %s: %v", tc.listen, auth, err)
				}
			}
		}
	}
}
