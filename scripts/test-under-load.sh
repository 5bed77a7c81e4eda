#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The whole suite under load: ROUNDS rounds (default 5) of two `make test`
# side by side, each in its own clone of this repository's HEAD, so that
# each suite shares the machine with the other (and their QEMU guests).
# A test that fails here reads an asynchronous effect once instead of
# waiting for it with a bound (Documentation/results.rst, "The test
# suite under load").
#
#   scripts/test-under-load.sh [ROUNDS] [DIR]
#
# DIR (default a new temporary directory) keeps the clones and each
# suite's log, roundN-a.log and roundN-b.log. Prints a line per suite,
# then "load: N passed, N failed" (suites); exits 1 if any failed.
set -u
rounds=${1:-5}
dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/djinn-load.XXXXXX")}
top=$(git rev-parse --show-toplevel) || exit 1
rev=$(git -C "$top" rev-parse HEAD) || exit 1
mkdir -p "$dir" || exit 1
cd "$dir" || exit 1
for side in a b; do
	rm -rf "$side"
	git clone -q "$top" "$side" && git -C "$side" checkout -q "$rev" ||
		exit 1
done
echo "load: $rounds rounds of two make test at $rev, in $dir"
pass=0 fail=0
for round in $(seq 1 "$rounds"); do
	for side in a b; do
		(cd "$side" && make test >"../round$round-$side.log" 2>&1) &
	done
	for side in a b; do
		wait -n
	done
	for side in a b; do
		line=$(grep -E '^tests: ' "round$round-$side.log" | tail -1)
		if grep -q '^make: \*\*\*' "round$round-$side.log" ||
			! echo "$line" | grep -q ' 0 failed'; then
			fail=$((fail + 1))
			echo "round $round $side: FAILED: ${line:-no summary}" \
				"($dir/round$round-$side.log)"
		else
			pass=$((pass + 1))
			echo "round $round $side: $line"
		fi
	done
done
echo "load: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
