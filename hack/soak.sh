#!/bin/sh
# hack/soak.sh: the soak test (not in CI). Keeps the proxy busy through
# the emulated modem for SOAK_DURATION (default 10m) and prints a table of
# heap and goroutine samples every SOAK_EVERY (default 30s); see
# docs/RELIABILITY.md.
set -eu
cd "$(dirname "$0")/.."
dur=${SOAK_DURATION:-10m}
every=${SOAK_EVERY:-30s}
exec go test -count=1 -run '^TestSoak$' -v -timeout 0 ./reliability/ -soak.duration="$dur" -soak.every="$every"
