# SPDX-License-Identifier: MIT
# shellcheck shell=sh
# shellcheck disable=SC2034,SC2154 # names set for, or by, the test
#
# What the shell tests (test_djinnctl, test_install, test_reload,
# test_service) share, sourced from beside them: make installs it as
# BUILD/tests/integration/testlib.sh with them. A test sets `here` to its
# own directory, sources this file and gets
#
#   me          its name (test_reload), which its messages start with;
#   build       the build tree it was installed in (BUILD, above here);
#   skip WHY    "ME: skipped: WHY" and exit 77 (it cannot run here);
#   fail WHAT   "FAIL: WHAT", counted in $failures;
#   ok WHAT     "ok: WHAT";
#   make_dir    $dir, a new temporary directory (or skip);
#   djinnd_wait [SOCK ADMIN]
#               wait (at most 20 s) until the djinnd of $dpid, logging to
#               $dir/djinnd.log, serves on SOCK and ADMIN ($dir/d.sock
#               and $dir/admin.sock by default: $DJINNCTL, else the
#               build's djinnctl,
#               gets an answer on the admin socket, made after the
#               other): skip where it cannot run (io_uring is off here,
#               and djinnd said so), else exit 1 with its log if it
#               exited;
#   finish      "ME: N failed" and exit 1, or "ME: passed" and exit 0.

me=${0##*/}
me=${me%.sh}
build=$(cd "$here/../.." && pwd)
failures=0

skip() {
	echo "$me: skipped: $*"
	exit 77
}

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

ok() {
	echo "ok: $*"
}

make_dir() {
	dir=$(mktemp -d "${TMPDIR:-/tmp}/$me.XXXXXX") ||
		skip "cannot make a temporary directory"
}

# djinnd's line when io_uring_setup(2) fails with ENOSYS or EPERM: no
# io_uring in this kernel, or turned off (kernel.io_uring_disabled), or a
# seccomp filter. The one reason to skip; any other exit at start fails.
uring_off='djinnd err: io_uring: (Function not implemented|Operation not permitted)$'

djinnd_wait() {
	sock=${1:-$dir/d.sock}
	asock=${2:-$dir/admin.sock}
	i=0
	# a socket file exists from bind(), a moment before listen()
	until [ -S "$sock" ] && [ -S "$asock" ] &&
		"${DJINNCTL:-$build/tools/djinnctl}" -s "$asock" \
			stats >/dev/null 2>&1; do
		if ! kill -0 "$dpid" 2>/dev/null; then
			wait "$dpid"
			rc=$?
			if [ "$rc" -eq 1 ] &&
				grep -Eq "$uring_off" "$dir/djinnd.log"; then
				skip "djinnd cannot run here: $(grep -E "$uring_off" "$dir/djinnd.log")"
			fi
			echo "FAIL: djinnd exited at start (status $rc):"
			sed 's/^/    | /' "$dir/djinnd.log"
			exit 1
		fi
		i=$((i + 1))
		if [ "$i" -gt 200 ]; then
			echo "FAIL: djinnd does not serve after 20 s:"
			sed 's/^/    | /' "$dir/djinnd.log"
			exit 1
		fi
		sleep 0.1
	done
}

finish() {
	if [ "$failures" -ne 0 ]; then
		echo "$me: $failures failed"
		exit 1
	fi
	echo "$me: passed"
	exit 0
}
