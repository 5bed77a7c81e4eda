#!/bin/sh
# Runs test binaries, one after another. Exit status 77 means the test
# could not run on this machine (it says why) and counts as skipped.
# Ends with one summary line, "tests: N passed, N failed, N skipped", and
# exits 1 if anything failed. When nothing passed and nothing failed
# (every test skipped, or none was given), nothing was tested: a line
# "skipped: ..." comes before the summary and the exit status is 77,
# which is no pass (make test fails on it; make test-gpu says why).
pass=0 fail=0 skip=0 failed='' skipped=''
for t in "$@"; do
	echo "== $t"
	"$t"
	rc=$?
	case $rc in
	0) pass=$((pass + 1)) ;;
	77) skip=$((skip + 1)); skipped="$skipped $t" ;;
	*) fail=$((fail + 1)); failed="$failed $t" ;;
	esac
done
[ -n "$failed" ] && echo "failed:$failed"
if [ "$pass" -eq 0 ] && [ "$fail" -eq 0 ]; then
	echo "skipped: every test skipped, nothing was tested:${skipped:- no tests given}"
	echo "tests: $pass passed, $fail failed, $skip skipped"
	exit 77
fi
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
