#!/bin/sh
# Runs test binaries, one after another. Exit status 77 means the test
# could not run on this machine (it says why) and counts as skipped.
# Ends with one summary line and exits non-zero if anything failed.
pass=0 fail=0 skip=0 failed=
for t in "$@"; do
	echo "== $t"
	"$t"
	rc=$?
	case $rc in
	0) pass=$((pass + 1)) ;;
	77) skip=$((skip + 1)) ;;
	*) fail=$((fail + 1)); failed="$failed $t" ;;
	esac
done
[ -n "$failed" ] && echo "failed:$failed"
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
