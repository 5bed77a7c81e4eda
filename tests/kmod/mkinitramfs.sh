#!/bin/sh
# mkinitramfs.sh OUT INIT MODULE BINARY...
#
# $KT_MODULES: more kernel modules (paths, each after what it needs) for
# the guest's /init to load.
#
# The test guest's initramfs (gzip'd newc cpio): static busybox, INIT as
# /init, MODULE as /djinn.ko and each BINARY in /tests. The binaries are
# dynamically linked (Debian ships libcmocka as a shared library only), so
# the libraries ldd names for them go in too, at the same paths, with the
# dynamic loader.
set -eu
out=$1 init=$2 ko=$3
shift 3

busybox=/bin/busybox
if ! [ -x $busybox ] || ldd $busybox >/dev/null 2>&1; then
	echo "mkinitramfs: $busybox is missing or not static (busybox-static)" >&2
	exit 1
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
chmod 755 "$root" # the guest's /: nobody must get through it
mkdir -p "$root/bin" "$root/dev" "$root/proc" "$root/sys" "$root/tmp" \
	"$root/tests"
cp $busybox "$root/bin/busybox"
for a in $("$busybox" --list); do
	[ "$a" = busybox ] || ln -s busybox "$root/bin/$a"
done
cp "$init" "$root/init"
chmod 755 "$root/init"
cp "$ko" "$root/djinn.ko"
# other modules the tests load ($KT_MODULES, dependencies first), in
# /modules with their order in /modules/order
mkdir -p "$root/modules"
for m in ${KT_MODULES:-}; do
	cp "$m" "$root/modules/"
	basename "$m" >>"$root/modules/order"
done

for b in "$@"; do
	cp "$b" "$root/tests/"
	ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u | while read -r lib; do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
# the loader at the path the binaries name in PT_INTERP
mkdir -p "$root/lib64"
[ -e "$root/lib64/ld-linux-x86-64.so.2" ] ||
	cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"

(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 >"$out.tmp"
mv "$out.tmp" "$out"
