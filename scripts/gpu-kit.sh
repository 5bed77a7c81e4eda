#!/bin/sh
# The GPU checks of issues 5 and 6 on a machine that can run them but not
# build them: a GPU host with the NVIDIA driver and CUDA's libraries but
# without this tree's Debian build dependencies (liburing, libnl, jansson,
# cmocka, OpenBLAS, inih).
#
#   scripts/gpu-kit.sh pack [KIT]       here, after `make`: the GPU tests,
#                                       djinnd, the benchmarks and every
#                                       shared library they need that is
#                                       not glibc's or the driver's, into
#                                       KIT (default .gpu-kit) and
#                                       KIT.tar.xz (about 9 MB), both
#                                       ignored by git
#   scripts/gpu-kit.sh run [KIT] [OUT]  there, from the repository root
#                                       (KIT.tar.xz is unpacked if KIT is
#                                       not there): make test-gpu's tests,
#                                       gpu-bench and model-bench
#                                       --backend cuda, each one's output
#                                       in OUT (default KIT/out) and on
#                                       stdout
#
# With the device tool: `scripts/gpu-kit.sh pack` here, then a run with
# carry [".gpu-kit.tar.xz"] and the command `scripts/gpu-kit.sh run
# .gpu-kit $OUT`.
#
# `run` exits 0 when every test passed or was skipped (77) and both
# benchmarks ran or skipped; 1 otherwise. Without a GPU everything skips.
set -u

kit=${2:-.gpu-kit}

pack() {
	build=${BUILD:-build}
	rm -rf "$kit" && mkdir -p "$kit/bin" "$kit/lib" || exit 1
	for f in "$build"/djinnd/djinnd "$build"/tools/djinnctl \
		"$build"/bench/gpu-bench "$build"/bench/model-bench \
		"$build"/tests/gpu/test_*; do
		case $f in *.o | *.d) continue ;; esac
		[ -x "$f" ] || { echo "gpu-kit: no $f: run make first" >&2; exit 1; }
		cp "$f" "$kit/bin/" || exit 1
		strip --strip-debug "$kit/bin/${f##*/}" 2>/dev/null
	done
	# Shared libraries by soname, less the C library's own and the
	# driver's, which the GPU host has (and must match its kernel).
	for f in "$kit"/bin/*; do
		head -c 4 "$f" | grep -q ELF || continue
		ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
	done | sort -u | while read -r soname path; do
		case $soname in
		libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
		librt.so.* | ld-linux*.so.* | libcuda.so.*) continue ;;
		esac
		cp -L "$path" "$kit/lib/$soname" || exit 1
	done
	tar -cJf "$kit.tar.xz" -C "$kit" bin lib || exit 1
	du -sh "$kit" "$kit.tar.xz" | awk '{ print "gpu-kit: " $2 ", " $1 }'
}

run() {
	out=${3:-$kit/out}
	if [ ! -d "$kit/bin" ] && [ -f "$kit.tar.xz" ]; then
		mkdir -p "$kit" && tar -xJf "$kit.tar.xz" -C "$kit" || exit 1
	fi
	[ -d "$kit/bin" ] || { echo "gpu-kit: no $kit/bin: pack first" >&2; exit 1; }
	mkdir -p "$out" || exit 1
	# cuBLAS where CUDA's toolkit or PyTorch's wheels keep it
	extra=
	for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib \
		/opt/*/.venv/lib/python3*/site-packages/nvidia/cublas/lib \
		/usr/local/lib/python3*/dist-packages/nvidia/cublas/lib; do
		[ -d "$d" ] && ls "$d"/libcublas.so.* >/dev/null 2>&1 &&
			extra="$extra:$d"
	done
	LD_LIBRARY_PATH="$(cd "$kit/lib" && pwd)$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	DJINND=$(cd "$kit/bin" && pwd)/djinnd
	export LD_LIBRARY_PATH DJINND
	nvidia-smi -L 2>&1 | tee "$out/nvidia-smi.txt"
	rc=0
	tests=$(ls "$kit"/bin/test_* 2>/dev/null)
	# shellcheck disable=SC2086
	sh tests/run.sh $tests 2>&1 | tee "$out/test-gpu.txt"
	tail -1 "$out/test-gpu.txt" | grep -q ' 0 failed' || rc=1
	"$kit/bin/gpu-bench" --djinnd "$DJINND" >"$out/gpu-bench.jsonl" \
		2>"$out/gpu-bench.err"
	s=$?
	cat "$out/gpu-bench.jsonl" "$out/gpu-bench.err"
	[ $s = 0 ] || [ $s = 77 ] || rc=1
	"$kit/bin/model-bench" --backend cuda --cache "${BENCH_CACHE:-/tmp/djinn-bench-cache}" \
		--python "${PYTHON:-python3}" --rounds "${ROUNDS:-5}" \
		>"$out/model-bench.jsonl" 2>"$out/model-bench.err"
	s=$?
	cat "$out/model-bench.jsonl" "$out/model-bench.err"
	[ $s = 0 ] || [ $s = 77 ] || rc=1
	echo "gpu-kit: results in $out (exit $rc)"
	return $rc
}

case ${1:-} in
pack) pack ;;
run) run "$@" ;;
*)
	echo "usage: $0 pack [KIT] | run [KIT] [OUT]" >&2
	exit 2
	;;
esac
