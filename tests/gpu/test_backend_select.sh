#!/bin/sh
# SPDX-License-Identifier: MIT
#
# djinnd's choice of backend, on any host: with a GPU and driver, and
# without (where it matters most, since djinnd must still start there).
#
#   --backend auto   starts, and its log says which backend and why: a
#                    cuda:N line, or "...: using the cpu" and device cpu
#   --backend cuda   starts where auto chose cuda; elsewhere exits 1 at
#                    once with "backend cuda: <the same reason>"
#   bad values       refused with the configuration's message
#
# The daemon is $DJINND, else the one of the build tree this script was
# installed in (make installs it as BUILD/tests/gpu/test_backend_select).
# Exit status: 0 pass, 1 fail.

set -u

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)
DJINND=${DJINND:-$build/djinnd/djinnd}
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

fail() {
	echo "test_backend_select: FAIL: $*"
	[ -f "$tmp/log" ] && sed 's/^/  log: /' "$tmp/log"
	exit 1
}

# Start djinnd with "$@"; 0 once it listens, 1 if it exited (status in
# $status), the log in $tmp/log.
start() {
	# the old log goes first: the child truncates it only once it runs,
	# and the loop below must not read the last daemon's lines
	rm -f "$tmp/s" "$tmp/a" "$tmp/log"
	"$DJINND" --foreground --config /dev/null --listen "unix:$tmp/s" \
		--admin-socket "$tmp/a" --log-level info "$@" \
		>"$tmp/log" 2>&1 &
	pid=$!
	i=0
	while [ $i -lt 300 ]; do
		if grep -qs "listening on unix:$tmp/s" "$tmp/log"; then
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid"
			status=$?
			pid=
			return 1
		fi
		sleep 0.05
		i=$((i + 1))
	done
	fail "djinnd $* neither listens nor exits after 15 s"
}

stop() {
	kill -TERM "$pid"
	wait "$pid"
	status=$?
	pid=
	[ "$status" -eq 0 ] || fail "djinnd exited $status on SIGTERM"
}

[ -x "$DJINND" ] || fail "no djinnd at $DJINND"

# auto: starts either way, and says which and why
start --backend auto || fail "--backend auto did not start (exit $status)"
if grep -q "backend auto: cuda:[0-9]" "$tmp/log"; then
	gpu=yes
	grep -q "device cuda:0" "$tmp/log" || fail "no 'device cuda:0' line"
	echo "ok: --backend auto chose the GPU:" \
		"$(grep -o 'backend auto: .*' "$tmp/log")"
else
	gpu=no
	why=$(sed -n 's/.*backend auto: \(.*\): using the cpu$/\1/p' "$tmp/log")
	[ -n "$why" ] || fail "--backend auto says neither cuda nor why not"
	grep -q "device cpu" "$tmp/log" || fail "auto fell back, but not to cpu"
	echo "ok: --backend auto chose the cpu: $why"
fi
stop

# cuda: the GPU, or a clear refusal with auto's reason
if [ $gpu = yes ]; then
	start --backend cuda || fail "--backend cuda did not start"
	stop
	echo "ok: --backend cuda starts"
else
	if start --backend cuda; then
		stop
		fail "--backend cuda started on a host where auto chose the cpu"
	fi
	case $why in
	*"built without the CUDA backend"*)
		# refused by the configuration, before anything starts
		[ "$status" -eq 2 ] || fail "--backend cuda exited $status, not 2"
		grep -q "cuda is not built into this djinnd" "$tmp/log" ||
			fail "--backend cuda does not say it is not built in"
		;;
	*)
		[ "$status" -eq 1 ] || fail "--backend cuda exited $status, not 1"
		grep -qF "backend cuda: $why" "$tmp/log" ||
			fail "--backend cuda does not say why: want '$why'"
		;;
	esac
	echo "ok: --backend cuda refuses: $why"
fi

# the configuration's refusals
"$DJINND" --config /dev/null --backend tpu >"$tmp/log" 2>&1
[ $? -eq 2 ] || fail "--backend tpu: want exit 2"
grep -q "device.backend: 'tpu': want cpu or cuda (or auto)" "$tmp/log" ||
	fail "--backend tpu: wrong message"
"$DJINND" --config /dev/null --backend cpu --device 0 --device 1 \
	--check-config >"$tmp/log" 2>&1 ||
	fail "--backend cpu --device 0 --device 1: refused (one CPU device each)"
grep -q "^devices = 0,1" "$tmp/log" || fail "--backend cpu: devices not 0,1"
"$DJINND" --config /dev/null --backend auto --device 2 --device 0 \
	--check-config >"$tmp/log" 2>&1 || fail "--check-config refused"
grep -q "^backend = auto" "$tmp/log" || fail "--check-config: no backend"
grep -q "^devices = 0,2" "$tmp/log" || fail "--device twice: not 0,2"
echo "ok: bad values refused, --device repeatable"
echo "test_backend_select: passed"
