#!/bin/sh
# test_kmod [test|bench]: boot Debian's kernel in QEMU with the initramfs
# built beside this script (djinn.ko, busybox, the test programs) and run
# the in-guest tests (or the benchmark) there, in one boot.
#
# KVM when /dev/kvm works (a short probe boot decides; DJINN_KVM=0 skips
# it), TCG otherwise. Exit 0 when every in-guest test passed and the
# kernel log stayed clean, 1 when one failed, one of those expected below
# did not report, or the guest never finished, 77 when the VM cannot run
# here (it says why).
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-test}
initrd=$here/initramfs.cpio.gz
skip() {
	echo "test_kmod: skipped: $*"
	exit 77
}

command -v qemu-system-x86_64 >/dev/null ||
	skip "qemu-system-x86_64 is not installed (qemu-system-x86)"
[ -r "$here/kernel-release" ] ||
	skip "djinn.ko was not built: no kernel headers in /usr/src (linux-headers-amd64)"
kernel=/boot/vmlinuz-$(cat "$here/kernel-release")
[ -r "$kernel" ] ||
	skip "no $kernel to boot (linux-image-amd64 of the headers' version)"
[ -r "$initrd" ] || skip "$initrd was not built"

# The results the guest's /init (tests/kmod/init.sh) must report in this
# mode, whatever else it reports: a guest that ran nothing, or lost a
# test on the way, must not pass on the results it did print. test_ktls
# and tls_bench are left out: they run only where the kernel has tls.ko.
case $mode in
bench) expect="bench lbench" ;;
*)
	expect="klog_scan insmod"
	if [ -n "${DJINN_ONLY:-}" ]; then
		expect="$expect $DJINN_ONLY"
	else
		expect="$expect test_ioctl test_lease test_ring test_netlink"
		expect="$expect test_stress test_djinnd test_kdev test_limits"
		expect="$expect load_unload"
	fi
	;;
esac

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# qemu SECONDS ARGS...: one boot, at most SECONDS long; the serial
# console on stdout
qemu() {
	secs=$1
	shift
	timeout "$secs" qemu-system-x86_64 -m "$mem" -smp 2 -display none \
		-monitor none -serial stdio -no-reboot -kernel "$kernel" \
		-initrd "$initrd" "$@" </dev/null 2>&1
}

# The tests run with SLUB's red zones and poisoning; the benchmark
# without, since they would time the allocator's checks.
cmdline="console=ttyS0 quiet loglevel=4 panic=-1"
# the benchmark moves tensors (djinn-bench tls)
mem=1024
[ "$mode" = bench ] && mem=3072
[ "$mode" = bench ] || cmdline="$cmdline slub_debug=FZPU"
# DJINN_ONLY=NAME: only that in-guest test (while working on it)
[ -z "${DJINN_ONLY:-}" ] || cmdline="$cmdline djinn.only=$DJINN_ONLY"
accel="-accel tcg"
if [ "${DJINN_KVM:-1}" != 0 ] && [ -w /dev/kvm ]; then
	# nested KVM that hangs is common: a boot that prints a line decides
	if qemu 15 -accel kvm -cpu host -append "$cmdline djinn.mode=probe" |
		grep -q DJINN-PROBE-OK; then
		accel="-accel kvm -cpu host"
	else
		echo "test_kmod: KVM did not boot the probe; using TCG"
	fi
fi
echo "test_kmod: booting $kernel ($accel)"

start=$(date +%s)
# shellcheck disable=SC2086
qemu 900 $accel -append "$cmdline djinn.mode=$mode" | sed -u 's/\r$//' | tee "$log"
echo "test_kmod: the guest ran $(($(date +%s) - start)) s"

if ! grep -q '^DJINN-RESULT' "$log"; then
	if grep -q 'qemu-system-x86_64:' "$log" && ! grep -q DJINN "$log"; then
		skip "QEMU could not start: $(grep 'qemu-system-x86_64:' "$log" | head -1)"
	fi
fi
failed=$(awk '$1 == "DJINN-RESULT" && $3 != 0 { print $2 }' "$log")
passed=$(awk '$1 == "DJINN-RESULT" && $3 == 0 { n++ } END { print n + 0 }' "$log")
if ! grep -q '^DJINN-DONE' "$log"; then
	echo "test_kmod: FAIL: the guest did not finish (crash, panic or timeout)"
	exit 1
fi
if [ -n "$failed" ]; then
	echo "test_kmod: FAIL:" $failed
	exit 1
fi
results=$(awk '$1 == "DJINN-RESULT" { n++ } END { print n + 0 }' "$log")
if [ "$results" -eq 0 ]; then
	echo "test_kmod: FAIL: the guest finished without a single result"
	exit 1
fi
missing=
for t in $expect; do
	awk -v t="$t" '$1 == "DJINN-RESULT" && $2 == t { f = 1 } END { exit !f }' \
		"$log" || missing="$missing $t"
done
if [ -n "$missing" ]; then
	echo "test_kmod: FAIL: no result from:$missing ($results results)"
	exit 1
fi
echo "test_kmod: $passed in-guest tests passed"
exit 0
