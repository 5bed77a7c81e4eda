#!/bin/sh
# SPDX-License-Identifier: MIT
#
# djinnd's data paths for a GPU, on the CPU: the raw-protocol tests
# (test_framing, test_sessions, test_tensors, test_text, test_graphs,
# test_leases, test_admin, test_metrics, test_models) and
# test_libdjinn_models again, with every djinnd they start given
# --cpu-device-only, so that djinnd reaches its device's memory only
# through the provider's copies, as it must a GPU's. Reads (whole,
# ranges, lazy stubs, swapped-out and text tensors, logits, hidden
# states) then go through the memory executor's staging buffers instead
# of being sent from device memory.
#
# The binaries are those of the build tree this script was installed in
# (BUILD/tests/integration/); $DJINND names the daemon (make asan's).
#
# Exit status: 0 pass, 1 fail, 77 cannot run here (it says why).

set -u

here=$(cd "$(dirname "$0")" && pwd)
DJINND_EXTRA=--cpu-device-only
export DJINND_EXTRA

rc=0
for t in test_framing test_sessions test_tensors test_text test_graphs \
	test_leases test_admin test_metrics test_models test_libdjinn_models; do
	if [ ! -x "$here/$t" ]; then
		echo "test_device_only: skipped: no $here/$t"
		exit 77
	fi
	echo "== $t, --cpu-device-only"
	"$here/$t"
	s=$?
	case $s in
	0) ;;
	77) echo "test_device_only: skipped: $t could not run"; exit 77 ;;
	*) echo "test_device_only: $t failed ($s)"; rc=1 ;;
	esac
done
[ $rc = 0 ] && echo "test_device_only: passed"
exit $rc
