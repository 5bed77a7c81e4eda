#!/bin/sh
# SPDX-License-Identifier: MIT
#
# SIGHUP reloads djinnd.conf, seen from outside through djinnctl:
#   - a lower memory.pressure_warning turns the pressure of a daemon with
#     62% of its memory in use from normal to warning, and raising it
#     again turns it back;
#   - a new lease.default is the lease of sessions opened after the
#     reload, while a session opened before keeps its own;
#   - a setting that needs a restart (memory.budget) is named in the log
#     and the capacity stays what it was;
#   - a broken file is refused whole: nothing changes and djinnd serves on;
#   - SIGTERM still exits 0.
#
# The binaries are $DJINND, $DJINNCTL and $OPEN_SESSION, else those of the
# build tree this script was installed in (BUILD/tests/integration/).
#
# Exit status: 0 pass, 1 fail, 77 cannot run here (it says why).

set -u

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/integration/testlib.sh
. "$here/testlib.sh"
DJINND=${DJINND:-$build/djinnd/djinnd}
DJINNCTL=${DJINNCTL:-$build/tools/djinnctl}
OPEN_SESSION=${OPEN_SESSION:-$build/tests/integration/open_session}

for b in "$DJINND" "$DJINNCTL" "$OPEN_SESSION"; do
	[ -x "$b" ] || skip "$b is not built"
done

make_dir
dpid='' hpid=''
# shellcheck disable=SC2317 # called by the trap
cleanup() {
	# shellcheck disable=SC2086 # a list of pids
	[ -n "$hpid" ] && kill $hpid 2>/dev/null
	[ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# "ok" for a step only when it failed nothing since the last one.
f0=0
ok() {
	[ "$failures" -eq "$f0" ] && echo "ok: $*"
	f0=$failures
}

# djinnd.conf with the test's sockets, then the lines given.
conf() {
	{
		printf '[server]\nlisten = unix:%s\nadmin_socket = %s\n' \
			"$dir/d.sock" "$dir/admin.sock"
		printf '%s\n' "$@"
	} >"$dir/djinnd.conf"
}

# SIGHUP, then wait for the reload's last log line (the N-th reload).
reloads=0
hup() {
	reloads=$((reloads + 1))
	kill -HUP "$dpid"
	i=0
	until [ "$(grep -c -e 'reload: applied' -e 'reload: nothing' \
		-e 'keeping the running configuration' "$dir/djinnd.log")" \
		-ge "$reloads" ]; do
		i=$((i + 1))
		if [ "$i" -gt 200 ]; then
			fail "reload $reloads not logged within 20 s"
			sed 's/^/    | /' "$dir/djinnd.log"
			exit 1
		fi
		sleep 0.1
	done
}

pressure() {
	"$DJINNCTL" -s "$dir/admin.sock" vmu | sed -n 's/^pressure: *//p'
}
capacity() {
	"$DJINNCTL" -s "$dir/admin.sock" vmu | sed -n 's/^capacity: *\([^ ]*\).*/\1/p'
}
# The lease_ns of the session labelled @label.
lease_ns() {
	"$DJINNCTL" -s "$dir/admin.sock" -j session list |
		python3 -c 'import json, sys
print(*[s["lease_ns"] for s in json.load(sys.stdin) if s["label"] == sys.argv[1]])' "$1"
}

# Open a session for @tenant holding @bytes of data, in the background.
open_one() {
	spec=$1:1:2
	[ "$2" -gt 0 ] && spec=$spec:$2
	"$OPEN_SESSION" -t 60 "$dir/d.sock" "$spec" >"$dir/ids.$1" \
		2>"$dir/helper.$1" &
	hpid="$hpid $!"
	i=0
	until [ -s "$dir/ids.$1" ]; do
		i=$((i + 1))
		if [ "$i" -gt 100 ]; then
			echo "FAIL: open_session $1:"
			sed 's/^/    | /' "$dir/helper.$1"
			exit 1
		fi
		sleep 0.1
	done
}

command -v python3 >/dev/null 2>&1 ||
	skip "python3 is not installed (it reads djinnctl's JSON)"

# --- start: 64 MiB, the default thresholds and a 10 s lease ----------------------
conf '[memory]' 'budget = 64M' '[lease]' 'default = 10s'
"$DJINND" -f --config "$dir/djinnd.conf" -t 1 >"$dir/djinnd.log" 2>&1 &
dpid=$!
djinnd_wait

# 40 MiB of 64: 62.5 %, under the default warning at 80 %.
open_one alice 41943040
[ "$(pressure)" = normal ] || fail "pressure at 62% of 64Mi: $(pressure), want normal"
[ "$(lease_ns alice)" = 10000000000 ] ||
	fail "alice's lease: $(lease_ns alice), want 10 s"
ok "started: pressure normal, alice's lease 10 s"

# --- reload: thresholds and lease apply, the budget waits for a restart ---------
conf '[memory]' 'budget = 128M' 'pressure_warning = 50' '[lease]' 'default = 3s'
hup
[ "$(pressure)" = warning ] ||
	fail "pressure after pressure_warning = 50: $(pressure), want warning"
[ "$(capacity)" = 64Mi ] || fail "capacity after a reload: $(capacity), want 64Mi"
grep -q "reload: memory.budget: 64M -> 128M needs a restart; still 64M" \
	"$dir/djinnd.log" || fail "the budget's change is not logged as needing a restart"
grep -q "reload: memory.pressure_warning: 80 -> 50" "$dir/djinnd.log" ||
	fail "the threshold's change is not logged"
open_one bob 0
[ "$(lease_ns bob)" = 3000000000 ] ||
	fail "bob's lease, opened after the reload: $(lease_ns bob), want 3 s"
[ "$(lease_ns alice)" = 10000000000 ] ||
	fail "alice's lease after the reload: $(lease_ns alice), want still 10 s"
ok "reloaded: pressure warning, new sessions get 3 s, alice keeps 10 s, budget needs a restart"

# --- a broken file changes nothing ---------------------------------------------------
conf '[memory]' 'pressure_warning = 90' 'pressure_critical = 85'
hup
grep -q "djinnd.conf:6: memory.pressure_critical: pressure_warning (90%) must be below pressure_critical (85%): keeping the running configuration" \
	"$dir/djinnd.log" || fail "the broken file's error is not logged with its line"
[ "$(pressure)" = warning ] || fail "pressure after a refused reload: $(pressure)"
ok "a broken file is refused whole, naming its line"

# --- back to the defaults ---------------------------------------------------------------
conf '[memory]' 'budget = 64M'
hup
[ "$(pressure)" = normal ] ||
	fail "pressure after pressure_warning went back to 80: $(pressure)"
ok "the default threshold again: pressure normal"

kill -TERM "$dpid"
if wait "$dpid"; then
	ok "djinnd exits 0 on SIGTERM"
else
	fail "djinnd exited $? on SIGTERM"
fi
dpid=

if [ "$failures" -ne 0 ]; then
	echo "djinnd's log:"
	sed 's/^/    | /' "$dir/djinnd.log"
fi
finish
