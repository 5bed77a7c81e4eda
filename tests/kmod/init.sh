#!/bin/sh
# /init of the djinn.ko test guest (busybox sh). The kernel command line
# picks the mode: djinn.mode=test (default), bench or probe. Each result
# goes to the serial console as one line the host's runner reads:
#
#   DJINN-RESULT NAME RC    a test and its exit status
#   DJINN-DONE              everything ran; the guest powers off
#
# After the boot and after every test the kernel log is read and cleared;
# a line matching KLOG_BAD fails that test and the log is printed.
export PATH=/bin:/tests
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
ulimit -n 4096
ifconfig lo 127.0.0.1 up # TCP loopback (test_ktls)

KLOG_BAD='BUG|WARNING|Oops|general protection|Call Trace|lockdep|circular locking|KASAN|UBSAN|KFENCE|refcount_t|list_(add|del) corruption|Poison overwritten|Redzone|Object padding|soft lockup|hung_task|blocked for more than'

mode=test
only=
for w in $(cat /proc/cmdline); do
	case $w in
	djinn.mode=*) mode=${w#djinn.mode=} ;;
	djinn.only=*) only=${w#djinn.only=} ;; # one test (DJINN_ONLY=NAME)
	esac
done

finish() {
	echo "DJINN-DONE"
	sync
	poweroff -f
}

if [ "$mode" = probe ]; then
	echo "DJINN-PROBE-OK"
	poweroff -f
fi

# scan NAME: 0 if the kernel log since the last scan is clean
scan() {
	log=$(dmesg -c)
	if echo "$log" | grep -qE "$KLOG_BAD"; then
		echo "DJINN-KLOG $1: the kernel log has reports:"
		echo "$log"
		return 1
	fi
	return 0
}

result() {
	echo "DJINN-RESULT $1 $2"
}

boot=$(dmesg -c)
if echo "$boot" | grep -qE "$KLOG_BAD"; then
	echo "DJINN-BOOTLOG (before the module; not counted):"
	echo "$boot" | grep -E "$KLOG_BAD"
fi

# The scan itself must see a report: one planted in the log.
echo "djinn-test: WARNING: a report planted to check the log scan" >/dev/kmsg
if scan klog_scan >/dev/null; then
	echo "the kernel log scan missed a planted WARNING"
	result klog_scan 1
else
	result klog_scan 0
fi

if ! insmod /djinn.ko; then
	result insmod 1
	finish
fi
scan insmod
result insmod $?

# Kernel TLS needs the tls module and the kernel's AES-GCM (ctr, ghash,
# gcm; aesni-intel where the virtual CPU has AES-NI, which TCG's may
# not): /modules in order. Without tls.ko its test is skipped.
ktls=
for m in $(cat /modules/order 2>/dev/null); do
	insmod /modules/$m 2>/dev/null || echo "($m did not load)"
done
if grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp; then
	ktls=test_ktls
else
	echo "== test_ktls: skipped: no tls module for this kernel"
fi
scan modules >/dev/null

# (run-qemu.sh expects bench and lbench from this mode)
if [ "$mode" = bench ]; then
	djinn_kbench
	rc=$?
	scan bench || rc=1
	result bench $rc
	# djinnd's lease providers side by side (djinn_lbench)
	djinn_lbench
	rc=$?
	scan lbench || rc=1
	result lbench $rc
	# TLS through the kernel beside TCP and OpenSSL (djinn-bench tls),
	# its libdjinn.so where the initramfs keeps the build's
	if [ -n "$ktls" ]; then
		lib=$(find / -xdev -name libdjinn.so.0 | head -1)
		LD_LIBRARY_PATH=${lib%/*} djinn-bench --djinnd /tests/djinnd \
			--seconds 2 --bulk-mib 32 tls
		rc=$?
		scan tls_bench || rc=1
		result tls_bench $rc
	fi
	finish
fi


# (run-qemu.sh expects a result from each of these but test_ktls, and
# from klog_scan, insmod and load_unload: keep its list in step)
for t in test_ioctl test_lease test_ring test_netlink test_stress \
	test_djinnd test_kdev test_limits $ktls; do
	[ -z "$only" ] || [ "$only" = $t ] || continue
	echo "== $t"
	$t
	rc=$?
	scan $t || rc=1
	result $t $rc
done

[ -z "$only" ] || finish

# Load and unload 100 times, each time with four sessions open (rings
# mapped) in another process, which must keep the module in, and with a
# listener subscribed to the events group throughout.
echo "== load_unload"
rc=0
mkfifo /tmp/ready
djinn_holder listen >/tmp/ready &
listener=$!
read -r line </tmp/ready
[ "$line" = ready ] || { echo "listener did not start"; rc=1; }
i=0
while [ $rc = 0 ] && [ $i -lt 100 ]; do
	djinn_holder sessions 4 >/tmp/ready &
	holder=$!
	read -r line </tmp/ready
	if [ "$line" != ready ]; then
		echo "iteration $i: holder did not start"
		rc=1
		break
	fi
	if rmmod djinn 2>/dev/null; then
		echo "iteration $i: unloaded with sessions open"
		rc=1
		break
	fi
	kill -9 $holder
	wait $holder 2>/dev/null
	if ! rmmod djinn; then
		echo "iteration $i: rmmod failed after the sessions closed"
		rc=1
		break
	fi
	if ! insmod /djinn.ko; then
		echo "iteration $i: insmod failed"
		rc=1
		break
	fi
	i=$((i + 1))
done
kill -9 $listener
wait $listener 2>/dev/null
rmmod djinn || rc=1
echo "load_unload: $i cycles"
scan load_unload || rc=1
result load_unload $rc
finish
