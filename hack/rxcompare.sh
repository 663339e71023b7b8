#!/usr/bin/env bash
# rxcompare.sh: link RX cost per packet of the working tree against another
# commit, measured in one run, the two builds alternated.
#
#   hack/rxcompare.sh BASE [ROUNDS] [BENCH]
#
# BASE is a commit (e.g. HEAD~1); ROUNDS how many times each build runs
# (default 6); BENCH the benchmark pattern (default the 32 x 1500 B cases of
# BenchmarkRXCost and their InjectInbound baseline). It builds the link
# package's test binary at BASE (in a temporary worktree) and in the
# working tree, runs them in turn, and prints the median and range of
# poller-cpu-ns/pkt for each case and the ratio working tree / BASE.
# The benchmark's dispatcher parses each packet's network header as
# gVisor's network layer does, so buffer costs that a stack pays show.
set -euo pipefail
base=${1:?usage: hack/rxcompare.sh BASE [ROUNDS] [BENCH]}
rounds=${2:-6}
bench=${3:-'BenchmarkRXCost/(qmap5|qmap1|ntb16|inject)-32x1500B'}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q --detach "$tmp/base" "$base"
# The base gets this tree's benchmark file, so that both measure alike.
cp "$root/link/bench_test.go" "$tmp/base/link/bench_test.go"
echo "rxcompare: building $base and the working tree…" >&2
(cd "$tmp/base" && go test -c -o "$tmp/base.test" ./link/)
(cd "$root" && go test -c -o "$tmp/work.test" ./link/)
for i in $(seq "$rounds"); do
	for v in base work; do
		echo "rxcompare: round $i/$rounds, $v" >&2
		"$tmp/$v.test" -test.run '^$' -test.bench "$bench" -test.benchtime 1s |
			awk -v v="$v" '/^Benchmark/ { for (i = 2; i <= NF; i++) if ($i == "poller-cpu-ns/pkt") print v, $1, $(i-1) }' >>"$tmp/samples"
	done
done
awk -v base="$base" '
function median(a, n,   i, j, t) {
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ k = $1 SUBSEP $2; n[k]++; s[k, n[k]] = $3; cases[$2] = 1 }
END {
	printf "| case | %s poller ns/pkt | working tree | working tree / %s |\n|---|---|---|---|\n", base, base
	for (c in cases) {
		for (w = 0; w < 2; w++) {
			v = w ? "work" : "base"; k = v SUBSEP c; m = n[k]
			delete a; for (i = 1; i <= m; i++) a[i] = s[k, i]
			med[w] = median(a, m); lo[w] = a[1]; hi[w] = a[m]
		}
		printf "| %s | %.0f (%.0f–%.0f) | %.0f (%.0f–%.0f) | %.2f |\n", c, med[0], lo[0], hi[0], med[1], lo[1], hi[1], med[1] / med[0] | "sort"
	}
}' "$tmp/samples"
