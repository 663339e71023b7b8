// Package reliability holds the reliability system tests (docs/RELIABILITY.md) that need the
// whole pipeline: a client on the host → the SOCKS5/HTTP proxy
// (stack/proxy) → the stack (stack.Open) → the link endpoint → MHI → the
// emulated modem → its carrier network → a server on the host's
// loopback, and the rig they share with hack/storm: the pipeline, the
// hashed streams and the fault storm (RunStorm, which measures one run).
// docs/RELIABILITY.md describes the tests and their figures:
//
//	go test ./reliability                          # reduced sizes (CI)
//	go test ./reliability -run Storm -storm.bytes=1GiB -v
//	go run ./hack/storm -runs 10                   # the storm against fault-free runs
//	go test ./reliability -run Load -load.conns=1000 -load.idle=10000 -v
//	hack/soak.sh                                   # 10 minutes, not in CI
package reliability
