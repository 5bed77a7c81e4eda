#!/bin/sh
# SPDX-License-Identifier: MIT
#
# `make install` into a temporary DESTDIR, and `make uninstall` after it:
#   - the staged tree holds exactly the expected files, links and modes;
#     libdjinn.so has its soname and links, the unit and libdjinn.pc name
#     the installed paths;
#   - examples/hello.c builds against the installed pkg-config file
#     (PKG_CONFIG_PATH and PKG_CONFIG_SYSROOT_DIR into the stage), shared
#     and static, and runs against the installed djinnd;
#   - ldd resolves every installed binary and library (the staged libdir
#     standing in for ld.so's cache), and nothing has a run path into the
#     build tree;
#   - the configuration file is never overwritten, and uninstall keeps it
#     once edited; otherwise uninstall leaves nothing.
#
# Runs make in the source tree (the current directory, where make runs
# the tests, else the directory above the build tree) with the BUILD of
# the tree this script was installed in (BUILD/tests/integration/), and
# INSTALL_PREBUILT=1: it installs what make built, and compiles nothing.
#
# Exit status: 0 pass, 1 fail, 77 cannot run here (it says why).

set -u

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/integration/testlib.sh
. "$here/testlib.sh"
src=$(pwd)
[ -f "$src/mk/install.mk" ] || src=$(cd "$build/.." && pwd)

[ -f "$src/mk/install.mk" ] || skip "no source tree here or above $build"
for t in make cc pkg-config ldd readelf sha256sum; do
	command -v $t >/dev/null 2>&1 || skip "$t is not installed"
done
# make's BUILD, relative to the source tree when it is inside it.
case $build in
"$src"/*) BUILD=${build#"$src"/} ;;
*) BUILD=$build ;;
esac

make_dir
dest=$dir/stage
dpid=
# shellcheck disable=SC2317 # called by the trap
cleanup() {
	[ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# make, as a user would run it, not as the make that runs this test.
mk() {
	(
		unset MAKEFLAGS MFLAGS MAKELEVEL
		cd "$src" && make --no-print-directory BUILD="$BUILD" \
			INSTALL_PREBUILT=1 DESTDIR="$dest" "$@"
	) >"$dir/make.out" 2>&1
}

# --- install --------------------------------------------------------------------
if ! mk install; then
	cat "$dir/make.out"
	echo "FAIL: make install"
	exit 1
fi
ok "make install DESTDIR=$dest"

P=/usr/local
lib=$P/lib
version=$(sed -n 's/^LIBDJINN_VERSION *:= *//p' "$src/Makefile")
soname=libdjinn.so.$(echo "$version" | cut -d. -f1)

# The Python package goes where the interpreter make uses looks
# (mk/python.mk).
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
pysite=$P/lib/python$pyver/dist-packages
pyfiles=
[ -n "$pyver" ] && pyfiles=$(ls "$src"/python/djinn/*.py \
	"$src"/python/djinn/serve/*.py "$src"/python/djinn/k8s/*.py \
	"$src"/python/djinn/k8s/proto/*.proto "$src"/python/djinn/py.typed)

# What must be there: a line per path, "TYPE MODE PATH" (TYPE f or l).
{
	echo "f 755 $P/sbin/djinnd"
	echo "f 755 $P/bin/djinnctl"
	echo "f 755 $P/bin/djinn-bench"
	[ -f "$src/tools/djinn.c" ] && echo "f 755 $P/bin/djinn"
	echo "f 755 $lib/libdjinn.so.$version"
	echo "l 777 $lib/$soname"
	echo "l 777 $lib/libdjinn.so"
	echo "f 644 $lib/libdjinn.a"
	echo "f 644 $lib/pkgconfig/libdjinn.pc"
	for h in "$src"/include/djinn/*.h; do
		echo "f 644 $P/include/djinn/$(basename "$h")"
	done
	[ -f "$src/include/uapi/linux/djinn.h" ] &&
		echo "f 644 $P/include/linux/djinn.h"
	for m in "$src"/man/man[1-8]/*.[1-8]; do
		echo "f 644 $P/share/man/${m#"$src"/man/}"
	done
	echo "f 644 $P/lib/systemd/system/djinnd.service"
	echo "f 644 $P/lib/systemd/system/djinn-serve.service"
	echo "f 755 $P/bin/djinn-serve"
	echo "f 755 $P/bin/djinn-device-plugin"
	echo "f 644 $P/lib/sysusers.d/djinn-serve.conf"
	echo "f 644 /etc/djinn/djinnd.conf"
	echo "f 644 $P/share/djinn/install-manifest"
	for f in $pyfiles; do
		echo "f 644 $pysite/${f#"$src"/python/}"
	done
	if [ -f "$src/kmod/dkms.conf" ]; then
		kv=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$src/kmod/dkms.conf")
		for k in "$src"/kmod/*.c "$src"/kmod/*.h "$src"/kmod/Kbuild \
			"$src"/kmod/Makefile "$src"/kmod/dkms.conf; do
			case $k in *.mod.c) continue ;; esac
			[ -f "$k" ] && echo "f 644 /usr/src/djinn-$kv/$(basename "$k")"
		done
		echo "f 644 /usr/src/djinn-$kv/uapi/linux/djinn.h"
	fi
} | sort -k3 >"$dir/want"
(cd "$dest" && find . ! -type d) | sed 's|^\.||' | while read -r p; do
	if [ -L "$dest$p" ]; then
		echo "l 777 $p"
	else
		echo "f $(stat -c %a "$dest$p") $p"
	fi
done | sort -k3 >"$dir/got"
if diff -u "$dir/want" "$dir/got" >"$dir/diff"; then
	ok "the staged tree: $(wc -l <"$dir/got") files and links, modes as expected"
else
	fail "the staged tree differs from the expected list (- want, + got):"
	cat "$dir/diff"
fi

# The library: soname, links, exports.
if [ "$(readlink "$dest$lib/$soname")" = "libdjinn.so.$version" ] &&
	[ "$(readlink "$dest$lib/libdjinn.so")" = "$soname" ] &&
	readelf -d "$dest$lib/libdjinn.so.$version" |
	grep -q "(SONAME).*\[$soname\]"; then
	ok "libdjinn.so.$version: soname $soname, links $soname and libdjinn.so"
else
	fail "libdjinn's soname or links are wrong"
fi

# Paths inside installed files are the installed ones.
grep -q "^ExecStart=$P/sbin/djinnd --config /etc/djinn/djinnd.conf\$" \
	"$dest$P/lib/systemd/system/djinnd.service" ||
	fail "the unit's ExecStart is not $P/sbin/djinnd --config /etc/djinn/djinnd.conf"
if ! grep -q "^libdir=$lib\$" "$dest$lib/pkgconfig/libdjinn.pc" ||
	! grep -q "^includedir=$P/include\$" "$dest$lib/pkgconfig/libdjinn.pc"; then
	fail "libdjinn.pc does not name $lib and $P/include"
fi
cmp -s "$src/etc/djinnd.conf" "$dest/etc/djinn/djinnd.conf" ||
	fail "/etc/djinn/djinnd.conf is not etc/djinnd.conf"

# The installed Python package imports and finds the installed library.
if [ -n "$pyver" ]; then
	if out=$(PYTHONPATH="$dest$pysite" DJINN_LIBRARY="$dest$lib/$soname" \
		"$py" -c 'import djinn, djinn._lib as L; print(djinn.__version__, L.path())' 2>&1); then
		ok "the Python package imports from the stage and loads its libdjinn: $out"
	else
		fail "the installed Python package: $out"
	fi
fi

# --- an example client against the installed files --------------------------------
export PKG_CONFIG_PATH="$dest$lib/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$dest"

flags=$(pkg-config --cflags --libs libdjinn) ||
	fail "pkg-config --cflags --libs libdjinn"
case $flags in
*"-I$dest$P/include"*"-L$dest$lib"*) ;;
*) fail "pkg-config flags do not point into the stage: $flags" ;;
esac
# shellcheck disable=SC2086 # flags are words
if cc -Wall -Werror -o "$dir/hello" "$src/examples/hello.c" $flags \
	>"$dir/cc.out" 2>&1; then
	ok "examples/hello.c builds with pkg-config's $flags"
else
	fail "examples/hello.c does not build against the stage:"
	cat "$dir/cc.out"
fi
static=$(pkg-config --cflags --static --libs libdjinn |
	sed "s|-ldjinn|$dest$lib/libdjinn.a|")
# shellcheck disable=SC2086
if cc -Wall -Werror -o "$dir/hello-static" "$src/examples/hello.c" \
	$static >"$dir/cc.out" 2>&1 &&
	! ldd "$dir/hello-static" | grep -q libdjinn; then
	ok "examples/hello.c links libdjinn.a statically (pkg-config --static)"
else
	fail "examples/hello.c does not link libdjinn.a statically:"
	cat "$dir/cc.out"
fi

# ldd: everything resolves; libdjinn from the stage (ld.so's cache would
# find it in $lib, which Debian's ld.so.conf lists).
export LD_LIBRARY_PATH="$dest$lib"
for b in "$P/sbin/djinnd" "$P/bin/djinnctl" "$P/bin/djinn-bench" \
	"$lib/libdjinn.so.$version" "$P/bin/djinn" hello; do
	case $b in
	hello) f=$dir/hello ;;
	*) f=$dest$b ;;
	esac
	[ -e "$f" ] || continue
	if ! ldd "$f" >"$dir/ldd" 2>&1 || grep -q "not found" "$dir/ldd"; then
		fail "ldd $b:"
		cat "$dir/ldd"
	elif grep -q "libdjinn" "$dir/ldd" &&
		! grep -q "libdjinn.so.* => $dest$lib/$soname" "$dir/ldd"; then
		fail "ldd $b: libdjinn not from the stage: $(grep libdjinn "$dir/ldd")"
	else
		ok "ldd $b resolves $(wc -l <"$dir/ldd") libraries"
	fi
	if readelf -d "$f" | grep -E "R(UN)?PATH" | grep -q -e "$build" -e ORIGIN; then
		fail "$b has a run path into the build tree: $(readelf -d "$f" | grep PATH)"
	fi
done

# The installed djinnd serves the example built against the installed
# library.
"$dest$P/sbin/djinnd" --config /dev/null -f -l "unix:$dir/d.sock" \
	-a "$dir/admin.sock" -m 64M -t 1 >"$dir/djinnd.log" 2>&1 &
dpid=$!
djinnd_wait
if "$dir/hello" "unix:$dir/d.sock" >"$dir/hello.out" 2>&1; then
	ok "installed djinnd serves hello built from the stage"
else
	fail "hello against the installed djinnd:"
	cat "$dir/hello.out" "$dir/djinnd.log"
fi
kill -TERM "$dpid" 2>/dev/null
wait "$dpid" || fail "installed djinnd did not exit 0 on SIGTERM"
dpid=
unset LD_LIBRARY_PATH PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# --- uninstall ---------------------------------------------------------------------
left() {
	(cd "$dest" && find . -mindepth 1 | sort)
}
if mk uninstall && [ -z "$(left)" ]; then
	ok "make uninstall leaves nothing"
else
	fail "make uninstall left: $(left) $(cat "$dir/make.out")"
fi

# Twice over, with an edited configuration: install keeps the edit,
# uninstall keeps the edited file and removes all else.
if ! mk install || ! mk install; then
	fail "make install, twice: $(cat "$dir/make.out")"
fi
echo "; edited" >>"$dest/etc/djinn/djinnd.conf"
mk install
if ! grep -q "keeping $dest/etc/djinn/djinnd.conf" "$dir/make.out" ||
	! tail -n 1 "$dest/etc/djinn/djinnd.conf" | grep -q '^; edited$'; then
	fail "make install overwrote an edited djinnd.conf"
fi
mk uninstall
if [ "$(left)" = "$(printf './etc\n./etc/djinn\n./etc/djinn/djinnd.conf')" ] &&
	grep -q "keeping $dest/etc/djinn/djinnd.conf (edited since install)" \
		"$dir/make.out"; then
	ok "an edited djinnd.conf survives install and uninstall, alone"
else
	fail "after install twice, an edit and uninstall: $(left) $(cat "$dir/make.out")"
fi

finish
