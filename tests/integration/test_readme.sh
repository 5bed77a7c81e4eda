#!/bin/sh
# SPDX-License-Identifier: MIT
#
# README.md's snippets, run as a reader runs them. A fenced block after a
# line "<!-- readme-test: KIND -->" is taken, in the README's order:
#
#   daemon  djinnd as README starts it by hand: run first, in the
#           background, until its sockets are there; stopped with SIGTERM
#           at the end, when it must exit 0;
#   prog.c  a C fragment using `session`: written into prog.c inside a
#           main() that connects with djinn_connect(NULL) (so $DJINN_ADDR
#           as README exports it) and opens that session, each djinn_*
#           call of the fragment checked;
#   sh      run one after another in one shell (sh -eu), so that an
#           export carries to the blocks after it.
#
# They run in a scratch copy of the checkout: links to the source tree's
# files and to this build tree as build/, with run/ and models/ of its own
# (the model make run writes, written the same way), so that a djinnd of
# make run or make serve in the checkout is left alone. python3 is the
# interpreter make test uses; libdjinn is this build's.
#
# Installed by mk/readme.mk as BUILD/tests/integration/test_readme, with
# the source tree's path in place of @SRCDIR@ ($DJINN_SRC overrides it)
# and the interpreter in place of @PYTHON@ ($PYTHON overrides it).
# Exit status: 0 pass, 1 fail, 77 cannot run here (it says why).
set -u

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/integration/testlib.sh
. "$here/testlib.sh"
src=${DJINN_SRC:-@SRCDIR@}
py=${PYTHON:-@PYTHON@}

[ -f "$src/README.md" ] || skip "no README.md in $src (set DJINN_SRC)"
for b in "$build/djinnd/djinnd" "$build/tools/djinnctl" \
	"$build/libdjinn.so"; do
	[ -e "$b" ] || skip "$b is not built"
done
command -v cc >/dev/null 2>&1 || skip "no cc to build README's program"
"$py" -c 'import numpy' 2>/dev/null ||
	skip "$py has no numpy (Debian: python3-numpy)"

make_dir
dpid=
# shellcheck disable=SC2317 # called by the trap
cleanup() {
	[ -n "$dpid" ] && kill -s KILL -- "-$dpid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The blocks: $dir/block.N.KIND, and their README lines in $dir/blocks.
awk -v out="$dir" '
	/^<!-- readme-test: [a-z.]+ -->$/ {
		kind = $3; at = NR; next_fence = 1; next
	}
	next_fence {
		next_fence = 0
		if ($0 !~ /^```/) {
			printf "README.md:%d: a readme-test mark, then no block\n", at
			bad = 1
			next
		}
		n++; file = sprintf("%s/block.%d.%s", out, n, kind)
		print n, kind, at > (out "/blocks")
		printf "" > file
		inside = 1; next
	}
	inside && /^```$/ { inside = 0; close(file); next }
	inside { print > file }
	END { exit bad }
' "$src/README.md" || exit 1
[ -s "$dir/blocks" ] || { echo "FAIL: README.md marks no readme-test block"; exit 1; }
for k in daemon prog.c sh; do
	n=$(awk -v k="$k" '$2 == k' "$dir/blocks" | wc -l)
	case $k:$n in
	daemon:1 | prog.c:1) ;;
	sh:0) echo "FAIL: README.md marks no sh block"; exit 1 ;;
	sh:*) ;;
	*) echo "FAIL: README.md marks $n $k blocks, not 1"; exit 1 ;;
	esac
done
awk '$2 != "daemon" && $2 != "prog.c" && $2 != "sh" {
	print "FAIL: README.md:" $3 ": unknown readme-test kind " $2; bad = 1
} END { exit bad }' "$dir/blocks" || exit 1
block() { # the file of the block of kind $1 (the first)
	awk -v k="$1" -v d="$dir" '$2 == k { print d "/block." $1 "." k; exit }' \
		"$dir/blocks"
}

# The scratch checkout.
co=$dir/checkout
mkdir -p "$co" "$dir/bin"
for f in "$src"/*; do
	case ${f##*/} in
	build | build-* | run | models) ;;
	*) [ -e "$f" ] && ln -s "$f" "$co/${f##*/}" ;;
	esac
done
ln -s "$build" "$co/build"
ln -s "$py" "$dir/bin/python3"
PATH=$dir/bin:$PATH
export PATH
# this build's libdjinn, whichever build tree python/ sits beside
DJINN_LIBRARY=$build/libdjinn.so
export DJINN_LIBRARY
unset DJINN_ADDR DJINN_ADMIN_SOCKET DJINN_DEBUG

cd "$co" || exit 1
# The model make run writes (scripts/run.sh).
python3 scripts/mkmodel.py --arch gpt2 --layers 4 --embd 256 --heads 8 \
	--vocab 4096 --ctx 256 --seed 1 models/tiny-gpt2 >"$dir/mkmodel.log" 2>&1 || {
	echo "FAIL: scripts/mkmodel.py:"
	sed 's/^/    | /' "$dir/mkmodel.log"
	exit 1
}

# The daemon block, in a process group of its own.
daemon=$(block daemon)
echo "== README.md:$(awk '$2 == "daemon" { print $3 }' "$dir/blocks"): the daemon"
sed 's/^/    /' "$daemon"
# (the shell outlives SIGTERM, so that its status is djinnd's)
{
	echo "trap : TERM"
	cat "$daemon"
} >"$dir/daemon.sh"
setsid sh -eu "$dir/daemon.sh" >"$dir/djinnd.log" 2>&1 &
dpid=$!
djinnd_wait run/djinnd.sock run/admin.sock
ok "README's djinnd serves run/djinnd.sock"

# prog.c: the C fragment in a main() of its own.
# shellcheck disable=SC2094 # prog.c names the block's kind, not the file
{
	cat <<'EOF'
/* README.md's C fragment, inside a program (tests/integration/test_readme.sh) */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/djinn.h>

static int check(const char *call, int ret)
{
	if (ret < 0) {
		fprintf(stderr, "prog: %s: %s (%s)\n", call, strerror(-ret),
			djinn_last_error());
		exit(1);
	}
	return ret;
}

/* each call of the fragment, checked (a macro does not expand itself) */
#define CHECKED(f, ...) check(#f, f(__VA_ARGS__))
#define djinn_model_open(...) CHECKED(djinn_model_open, __VA_ARGS__)
#define djinn_model_upload(...) CHECKED(djinn_model_upload, __VA_ARGS__)
#define djinn_ctx_new(...) CHECKED(djinn_ctx_new, __VA_ARGS__)
#define djinn_ctx_prefill(...) CHECKED(djinn_ctx_prefill, __VA_ARGS__)
#define djinn_ctx_decode(...) CHECKED(djinn_ctx_decode, __VA_ARGS__)
#define djinn_ctx_resume(...) CHECKED(djinn_ctx_resume, __VA_ARGS__)
#define djinn_ctx_fork(...) CHECKED(djinn_ctx_fork, __VA_ARGS__)
#define djinn_ctx_reset(...) CHECKED(djinn_ctx_reset, __VA_ARGS__)
#define djinn_result_read(...) CHECKED(djinn_result_read, __VA_ARGS__)

int main(void)
{
	struct djinn_conn *conn;
	struct djinn_session *session;

	check("djinn_connect", djinn_connect(NULL, &conn));
	check("djinn_session_open", djinn_session_open(conn, NULL, &session));
	{
EOF
	cat "$(block prog.c)"
	cat <<'EOF'

		printf("prog: generated");
		for (unsigned int i = 0; i < sizeof(out) / sizeof(out[0]); i++)
			printf(" %d", out[i]);
		printf("; logit of the first %g\n", logit);
	}
	check("djinn_session_close", djinn_session_close(session));
	djinn_disconnect(conn);
	return 0;
}
EOF
} >prog.c

# The sh blocks, in one shell.
{
	echo "set -eu"
	awk '$2 == "sh" { print $1, $3 }' "$dir/blocks" | while read -r n at; do
		echo "echo '== README.md:$at'"
		echo "cat <<'README_BLOCK'"
		sed 's/^/    /' "$dir/block.$n.sh"
		echo "README_BLOCK"
		cat "$dir/block.$n.sh"
	done
} >"$dir/snippets.sh"
if sh -eu "$dir/snippets.sh" >"$dir/snippets.log" 2>&1; then
	cat "$dir/snippets.log"
	ok "README's sh blocks ran"
else
	cat "$dir/snippets.log"
	fail "README's sh blocks (above), against djinnd:"
	sed 's/^/    | /' "$dir/djinnd.log"
fi
grep -q '^prog: generated' "$dir/snippets.log" ||
	fail "prog (README's C fragment) printed no tokens"

# SIGTERM drains; djinnd exits 0 (within 20 s).
kill -s TERM -- "-$dpid"
i=0
while kill -0 "$dpid" 2>/dev/null && [ "$i" -lt 200 ]; do
	i=$((i + 1))
	sleep 0.1
done
kill -s KILL -- "-$dpid" 2>/dev/null
ret=0
wait "$dpid" || ret=$?
dpid=
if [ "$ret" -eq 0 ]; then
	ok "README's djinnd exits 0 on SIGTERM"
else
	fail "README's djinnd exited $ret on SIGTERM:"
	sed 's/^/    | /' "$dir/djinnd.log"
fi
finish
