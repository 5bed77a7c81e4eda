#!/bin/sh
# SPDX-License-Identifier: MIT
# Every man page in the tree renders without a groff warning, every
# page a SEE ALSO section names in sections 1, 3, 4, 5 or 8 as one of
# ours (djinn*, libdjinn) exists, and every function libdjinn exports has
# a page of its name in section 3 (a page or a .so link). The exports are
# the built libdjinn.so's ($DJINN_LIB, else the one beside this test),
# or without it the functions include/djinn/djinn.h declares.
# Exit 0 pass, 1 fail, 77 without groff.
set -u
here=$(dirname "$0")
src=${DJINN_SRC:-$here/../../..}
lib=${DJINN_LIB:-$here/../../libdjinn.so}
[ -d "$src/man" ] || { echo "test_man: no man/ under $src"; exit 1; }
if ! command -v groff >/dev/null 2>&1; then
	echo "test_man: groff is not installed: skipped"
	exit 77
fi
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail=0 n=0
if [ -f "$lib" ] && command -v nm >/dev/null 2>&1; then
	syms=$(nm -D --defined-only "$lib" |
		sed -n 's/^[0-9a-f]* T \(djinn_[a-z0-9_]*\)\(@.*\)\{0,1\}$/\1/p')
	from="$lib"
else
	syms=$(sed -n 's/^[a-z].*[ *]\(djinn_[a-z0-9_]*\)(.*/\1/p' \
		"$src/include/djinn/djinn.h")
	from="$src/include/djinn/djinn.h"
fi
[ -n "$syms" ] || { echo "test_man: no djinn_ functions in $from"; exit 1; }
for sym in $syms; do
	if [ ! -f "$src/man/man3/$sym.3" ]; then
		echo "test_man: $sym (exported by $from) has no man/man3/$sym.3"
		fail=1
	fi
done
cd "$src/man" || exit 1
src=..
# From man/, as man(1) runs it: ".so man3/page.3" links resolve there.
for page in man[1-8]/*.[1-8]; do
	n=$((n + 1))
	if ! groff -man -ww -z "$page" >"$err" 2>&1 || [ -s "$err" ]; then
		echo "test_man: groff warns about man/$page:"
		sed 's/^/  /' "$err"
		fail=1
	fi
	# .BR name (N) references to our own pages
	for ref in $(sed -n 's/^\.BR \(djinn[a-z_-]*\|libdjinn\) (\([13458]\)).*/\1.\2/p' "$page"); do
		name=${ref%.*} sec=${ref##*.}
		if [ ! -f "man$sec/$name.$sec" ]; then
			echo "test_man: man/$page refers to $name($sec), which does not exist"
			fail=1
		fi
	done
done
[ "$n" -gt 0 ] || { echo "test_man: no man pages found"; exit 1; }
[ "$fail" -eq 0 ] || exit 1
echo "test_man: $n pages render cleanly"
