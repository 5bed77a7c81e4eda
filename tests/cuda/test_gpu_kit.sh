#!/bin/sh
# SPDX-License-Identifier: MIT
#
# scripts/gpu-kit.sh, on any host with nvcc (make test):
#
#   pack   from this build tree: a kit and its tarball, with the
#          binaries, their libraries (not libcuda) and VERSIONS
#   run    from the tarball alone: the versions come first (driver,
#          toolkit, each cuBLAS and where, GPUs), and cuBLAS is found
#          where python3 says its nvidia packages are, in a CUDA 13
#          wheel layout (site-packages/nvidia/cu13/lib/libcublas.so.13)
#          and a CUDA 12 one (nvidia/cublas/lib/libcublas.so.12), both
#          made here from a stand-in (cublas-ok.so) in a fake
#          site-packages that python3 sees through PYTHONPATH.
#
# On a host with an NVIDIA driver `run` would run the whole GPU suite,
# so there the test runs `info` (what `run` prints first) instead.
#
# Installed by mk/cuda.mk as BUILD/tests/cuda/test_gpu_kit, with the
# source tree's path in place of @SRCDIR@ ($DJINN_SRC overrides it).
# Exit status: 0 pass, 1 fail, 77 skipped (no python3).

set -u

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)
src=${DJINN_SRC:-@SRCDIR@}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
	echo "test_gpu_kit: FAIL: $*"
	for f in "$tmp/pack.txt" "$tmp/run.txt" "$tmp/bare.txt"; do
		[ -f "$f" ] && sed "s|^|  ${f##*/}: |" "$f"
	done
	exit 1
}

command -v python3 >/dev/null 2>&1 || {
	echo "SKIP: no python3 (gpu-kit.sh asks it where cuBLAS is)"
	exit 77
}
[ -x "$src/scripts/gpu-kit.sh" ] || fail "no $src/scripts/gpu-kit.sh"
cd "$src" || fail "cd $src"

# --- pack --------------------------------------------------------------------
XZ_OPT=${XZ_OPT:--T0 -0} BUILD=$build scripts/gpu-kit.sh pack "$tmp/kit" >"$tmp/pack.txt" 2>&1 ||
	fail "pack exited $?"
[ -f "$tmp/kit.tar.xz" ] || fail "pack made no $tmp/kit.tar.xz"
for f in bin/djinnd bin/djinnctl bin/gpu-bench bin/model-bench \
	bin/stream-bench bin/test_cuda_ops bin/test_cuda_stream \
	bin/test_backend_select VERSIONS; do
	tar -tJf "$tmp/kit.tar.xz" | grep -qx "$f" || fail "no $f in the kit"
done
tar -tJf "$tmp/kit.tar.xz" | grep -q '^lib/libcuda\.' &&
	fail "the kit carries libcuda, which must be the GPU host's"
# the toolkit named is the one the build's nvcc is
nvcc=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
rel=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
[ -n "$rel" ] || fail "no release in $nvcc --version"
grep -qx "toolkit=$rel (nvcc V.*)" "$tmp/kit/VERSIONS" ||
	fail "VERSIONS does not name CUDA $rel: $(cat "$tmp/kit/VERSIONS")"
grep -qx 'cuda_version=[0-9]*' "$tmp/kit/VERSIONS" ||
	fail "VERSIONS has no cuda_version"

# --- a fake site-packages: CUDA 13 and CUDA 12 wheel layouts ------------------
site=$tmp/site-packages
mkdir -p "$site/nvidia/cu13/lib" "$site/nvidia/cublas/lib" || fail mkdir
for f in cu13/lib/libcublas.so.13 cublas/lib/libcublas.so.12; do
	cp "$here/cublas-ok.so" "$site/nvidia/$f" ||
		fail "no stand-in $here/cublas-ok.so"
done

# --- run (or info) from the tarball alone ---------------------------------------
rm -rf "$tmp/kit"
what=run
if (command -v nvidia-smi && nvidia-smi -L) >/dev/null 2>&1 ||
	python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
	what=info # a GPU host: not the whole suite from here
fi
# run: no GPU here, so every GPU test skips, which the kit says and
# exits 77 for (a skip is no pass)
want=0
[ $what = run ] && want=77
PYTHONPATH=$site PYTHON=python3 BENCH_CACHE=$tmp/cache \
	scripts/gpu-kit.sh $what "$tmp/kit" "$tmp/out" >"$tmp/run.txt" 2>&1
got=$?
[ $got = $want ] || fail "$what exited $got, want $want"
[ -x "$tmp/kit/bin/djinnd" ] || fail "$what did not unpack the kit"

# the versions, first: driver, toolkit, cuBLAS, GPUs, then anything else
awk -v what="$what" '
	/^gpu-kit: driver / { d = NR }
	/^gpu-kit: toolkit / { t = NR }
	/^gpu-kit: cuBLAS / { if (!b) b = NR }
	/^gpu-kit: GPU / { if (!g) g = NR }
	/^== / { if (!r) r = NR }
	END {
		if (d != 1 || t != 2 || b != 3 || !g || g < b) exit 1
		if (what == "run" && (!r || r < g)) exit 1
	}' "$tmp/run.txt" || fail "the versions are not printed first, in order"
grep -q "^gpu-kit: toolkit CUDA $rel " "$tmp/run.txt" ||
	fail "the toolkit line does not say CUDA $rel"
grep -q "^gpu-kit: cuBLAS  $site/nvidia/cu13/lib/libcublas.so.13 (python3's nvidia packages)" \
	"$tmp/run.txt" || fail "libcublas.so.13 of the CUDA 13 wheel layout not found"
grep -q "^gpu-kit: cuBLAS  $site/nvidia/cublas/lib/libcublas.so.12 (python3's nvidia packages)" \
	"$tmp/run.txt" || fail "libcublas.so.12 of the CUDA 12 wheel layout not found"
if [ $what = run ]; then
	# no driver here: djinnd is taken to want the kit's own major first
	major=$(($(sed -n 's/^cuda_version=//p' "$tmp/kit/VERSIONS") / 1000))
	if [ "$major" = 13 ]; then
		grep -q "cu13/lib/libcublas.so.13 .*<- djinnd tries this first" \
			"$tmp/run.txt" || fail "the cu13 libcublas.so.13 is not marked first"
	fi
	grep -q "^gpu-kit: skipped: no GPU" "$tmp/run.txt" ||
		fail "run did not say that no GPU test ran"
	grep -q "^gpu-kit: results in $tmp/out (exit 77)" "$tmp/run.txt" ||
		fail "run did not end with exit 77"
	[ -s "$tmp/out/versions.txt" ] || fail "no $tmp/out/versions.txt"
fi

# profile: where nsys is not (this build host), it says so, exit 77
if ! command -v nsys >/dev/null && [ ! -x /usr/local/cuda/bin/nsys ] &&
	! ls /opt/nvidia/nsight-systems/*/bin/nsys >/dev/null 2>&1; then
	PYTHON=python3 scripts/gpu-kit.sh profile "$tmp/kit" "$tmp/prof" \
		>"$tmp/prof.txt" 2>&1
	s=$?
	[ $s = 77 ] || fail "profile without nsys exited $s, not 77"
	grep -q "^gpu-kit: no nsys on this machine" "$tmp/prof.txt" ||
		fail "profile without nsys did not say so"
fi

# without the fake site-packages, neither is found: the test can fail
PYTHON=python3 scripts/gpu-kit.sh info "$tmp/kit" >"$tmp/bare.txt" 2>&1 ||
	fail "info exited $?"
grep -q "$site" "$tmp/bare.txt" && fail "found $site without PYTHONPATH"

echo "test_gpu_kit: passed ($what)"
exit 0
