#!/bin/sh
# SPDX-License-Identifier: MIT
#
# djinnd as a system service, without installing anything:
#   - systemd/djinnd.service.in, filled in as `make install` does, passes
#     `systemd-analyze verify` (its man: references found in man/), and a
#     broken copy of it does not (the verifier really checks);
#   - etc/djinnd.conf, the shipped configuration, checks; its commented
#     defaults, uncommented, are djinnd's real defaults;
#   - djinnd(8) and djinnd.conf(5) render without groff warnings.
#
# The daemon is $DJINND, else the one of the build tree this script was
# installed in (make installs it as BUILD/tests/integration/test_service).
# The source tree is the current directory (make runs tests from there),
# else the directory above the build tree.
#
# Exit status: 0 pass, 1 fail, 77 cannot run here (it says why).

set -u

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/integration/testlib.sh
. "$here/testlib.sh"
DJINND=${DJINND:-$build/djinnd/djinnd}
src=.
[ -f "$src/systemd/djinnd.service.in" ] || src="$build/.."

[ -x "$DJINND" ] || skip "$DJINND is not built"
[ -f "$src/systemd/djinnd.service.in" ] ||
	skip "no source tree (systemd/djinnd.service.in) here or above $build"
case $DJINND in
/*) ;;
*) DJINND=$(pwd)/$DJINND ;;
esac

make_dir
trap 'rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM


# --- the unit ----------------------------------------------------------------
# Filled in as mk/install.mk does, with ExecStart= at the built djinnd.
sed -e "s|@SBINDIR@|$(dirname "$DJINND")|g" -e "s|@SYSCONFDIR@|$dir|g" \
	"$src/systemd/djinnd.service.in" >"$dir/djinnd.service"
if grep -q "@[A-Z_]*@" "$dir/djinnd.service"; then
	fail "a placeholder is left in the unit: $(grep "@[A-Z_]*@" "$dir/djinnd.service")"
fi

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "note: systemd-analyze is not installed: unit not verified"
	unit_checked=no
else
	# Can systemd-analyze run at all here? A trivial unit must pass.
	printf '[Service]\nExecStart=/bin/true\n' >"$dir/trivial.service"
	if ! systemd-analyze verify --man=no "$dir/trivial.service" \
		>"$dir/out" 2>&1; then
		echo "test_service: skipped: systemd-analyze cannot run in" \
			"this container (a trivial unit fails):"
		cat "$dir/out"
		exit 77
	fi
	# man: references must resolve, to the pages in this tree.
	man_opt=--man=yes
	if ! command -v man >/dev/null 2>&1; then
		echo "note: man is not installed: Documentation= not checked"
		man_opt=--man=no
	fi
	if MANPATH="$(cd "$src/man" && pwd)" systemd-analyze verify \
		$man_opt "$dir/djinnd.service" >"$dir/out" 2>&1 &&
		[ ! -s "$dir/out" ]; then
		ok "systemd-analyze verify: djinnd.service is clean"
	else
		fail "systemd-analyze verify djinnd.service:"
		cat "$dir/out"
	fi
	# The verifier must catch a broken unit, or this test proves nothing.
	sed 's/^Type=notify/Type=notifyy/' "$dir/djinnd.service" \
		>"$dir/broken.service"
	if systemd-analyze verify --man=no "$dir/broken.service" \
		>"$dir/out" 2>&1 && [ ! -s "$dir/out" ]; then
		fail "systemd-analyze accepts Type=notifyy"
	else
		ok "systemd-analyze refuses a broken copy"
	fi
	unit_checked=yes
fi

# djinn-serve's unit, beside djinnd's (which it needs), with ExecStart= at
# the built wrapper.
sed -e "s|@BINDIR@|$build/install|g" -e "s|@SYSCONFDIR@|$dir|g" \
	"$src/systemd/djinn-serve.service.in" >"$dir/djinn-serve.service"
if grep -q "@[A-Z_]*@" "$dir/djinn-serve.service"; then
	fail "a placeholder is left in djinn-serve.service"
fi
if [ "$unit_checked" = yes ]; then
	if MANPATH="$(cd "$src/man" && pwd)" systemd-analyze verify \
		$man_opt "$dir/djinnd.service" "$dir/djinn-serve.service" \
		>"$dir/out" 2>&1 && [ ! -s "$dir/out" ]; then
		ok "systemd-analyze verify: djinn-serve.service is clean"
	else
		fail "systemd-analyze verify djinn-serve.service:"
		cat "$dir/out"
	fi
fi
for want in 'User=djinn-serve' 'Requires=djinnd.service' \
	"LoadCredential=keys:$dir/djinn/serve.keys" '--api-keys %d/keys' \
	"ExecStart=$build/install/djinn-serve "; do
	grep -qF -- "$want" "$dir/djinn-serve.service" ||
		fail "djinn-serve.service has no '$want'"
done

# What the issue asks of the unit, whether or not systemd could check it.
for want in 'Type=notify' 'ProtectSystem=strict' 'ProtectHome=yes' \
	'PrivateTmp=yes' 'NoNewPrivileges=yes' 'CapabilityBoundingSet=CAP_CHOWN CAP_SYS_ADMIN CAP_NET_ADMIN' \
	'Wants=modprobe@djinn.service' \
	'RuntimeDirectory=djinn' 'StateDirectory=djinn' 'Restart=on-failure' \
	'DeviceAllow=char-nvidia* rw' 'DeviceAllow=/dev/djinn rw' \
	'WatchdogSec=' "ExecStart=$(dirname "$DJINND")/djinnd --config $dir/djinn/djinnd.conf"; do
	grep -qF -- "$want" "$dir/djinnd.service" ||
		fail "the unit has no '$want'"
done
ok "the unit is hardened and notifies (unit checked by systemd: $unit_checked)"

# --- the shipped configuration ----------------------------------------------------
conf="$src/etc/djinnd.conf"
if "$DJINND" --check-config --config "$conf" >"$dir/shipped" 2>"$dir/err"; then
	ok "etc/djinnd.conf checks"
else
	fail "etc/djinnd.conf: $(cat "$dir/err")"
fi
# Every key is there, commented out with its default: uncommented, the
# file sets every key, to what djinnd uses with no file at all.
sed 's/^;\([a-z0-9_]* =\)/\1/' "$conf" >"$dir/uncommented.conf"
"$DJINND" --check-config --config "$dir/uncommented.conf" >"$dir/a" 2>&1 ||
	fail "etc/djinnd.conf uncommented: $(cat "$dir/a")"
"$DJINND" --check-config --config /dev/null >"$dir/b" 2>&1 ||
	fail "djinnd --check-config --config /dev/null: $(cat "$dir/b")"
# The sockets' defaults are root's (/run/djinn) in the file.
filter='s/\t;.*//; /^;/d'
[ "$(id -u)" -eq 0 ] || filter="$filter; /^listen =/d; /^admin_socket =/d"
sed "$filter" "$dir/a" >"$dir/a.values"
sed "$filter" "$dir/b" >"$dir/b.values"
if ! diff -u "$dir/b.values" "$dir/a.values" >"$dir/diff"; then
	fail "etc/djinnd.conf's commented values are not djinnd's defaults:"
	cat "$dir/diff"
fi
nkeys=$(grep -c "uncommented.conf:" "$dir/a")
nall=$(grep -c ' = \| =	' "$dir/b")
if [ "$nkeys" -ne "$nall" ]; then
	fail "etc/djinnd.conf shows $nkeys of djinnd's $nall keys"
else
	ok "etc/djinnd.conf shows all $nall keys with their defaults"
fi

# --- man pages -------------------------------------------------------------------------
if ! command -v groff >/dev/null 2>&1; then
	echo "note: groff is not installed: man pages not checked"
else
	for page in man8/djinnd.8 man5/djinnd.conf.5 man1/djinn-serve.1; do
		if groff -man -ww -z "$src/man/$page" >"$dir/err" 2>&1 &&
			[ ! -s "$dir/err" ]; then
			ok "$page renders without warnings"
		else
			fail "groff warns about $page: $(cat "$dir/err")"
		fi
	done
fi

finish
