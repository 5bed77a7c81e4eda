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
#                                       ignored by git, with KIT/VERSIONS
#                                       naming the CUDA toolkit it was
#                                       built with
#   scripts/gpu-kit.sh run [KIT] [OUT]  there, from the repository root
#                                       (KIT.tar.xz is unpacked if KIT is
#                                       not there): first the versions
#                                       (as `info`), then make test-gpu's
#                                       tests, gpu-bench, model-bench
#                                       (GPT-2 124M, then --arch
#                                       gpt2-tiny, whose step is the
#                                       host's and the launches') and
#                                       stream-bench --backend cuda (with
#                                       --rounds $ROUNDS, default 5, for
#                                       both), each one's output
#                                       in OUT (default KIT/out) and on
#                                       stdout
#   scripts/gpu-kit.sh agent [KIT] [OUT]
#                                       there: agent-bench --backend cuda
#                                       (Documentation/sched.rst): each
#                                       policy's density by --grow GROW
#                                       (default 32:256: from 32, doubling
#                                       while N meets the SLO, halving
#                                       while it misses, then bisecting),
#                                       or the list AGENTS when set;
#                                       MEASURE seconds a point (default
#                                       5)
#   scripts/gpu-kit.sh sessions [KIT] [OUT]
#                                       there: model-bench --backend cuda
#                                       --sessions (Documentation/
#                                       sched.rst, "Passes"): SESSIONS
#                                       (default 1,8,32) decoding
#                                       together through djinnd, batching
#                                       on and off, beside PyTorch's
#                                       batch; ROUNDS (default 1)
#   scripts/gpu-kit.sh tls [KIT] [OUT]
#                                       there: djinn-bench tls on the
#                                       host's kernel (kernel TLS when it
#                                       has the tls module), after what
#                                       the kernel and CPU offer
#   scripts/gpu-kit.sh python [KIT] [OUT]
#                                       there: the Python package's tests
#                                       (python/tests, with pytest and
#                                       numpy of python3 or $PYTHON)
#                                       against the kit's djinnd on the
#                                       GPU (--backend cuda), its C client
#                                       and libdjinn
#   scripts/gpu-kit.sh profile [KIT] [OUT]
#                                       there: a decode under nsys
#                                       (model-bench --backend cuda,
#                                       ARCH default gpt2-tiny, DECODE
#                                       tokens, default 64): the kernels'
#                                       and the CUDA API's time sums,
#                                       the profile in OUT/decode.nsys-rep;
#                                       without nsys it says so and
#                                       exits 77
#   scripts/gpu-kit.sh info [KIT]       the versions alone: the driver
#                                       (nvidia-smi and cuDriverGetVersion),
#                                       the toolkit the kit was built
#                                       with, each cuBLAS found and where,
#                                       and the GPUs
#
# cuBLAS is looked for where python3 (or $PYTHON) says its nvidia
# packages are (`import nvidia`: PyTorch's CUDA wheels; CUDA 13 wheels
# keep it in nvidia/cu13/lib, CUDA 12 ones in nvidia/cublas/lib) and in
# the toolkit's lib64 ($CUDA_HOME, default /usr/local/cuda); those
# directories go on LD_LIBRARY_PATH and djinnd picks among the sonames
# (Documentation/cuda.rst, "cuBLAS").
#
# With the device tool: `scripts/gpu-kit.sh pack` here, then a run with
# carry [".gpu-kit.tar.xz"] and the command `scripts/gpu-kit.sh run
# .gpu-kit $OUT`.
#
# `run` exits 0 when every GPU test passed and each benchmark ran or
# skipped; 77 when none failed but some skipped (no GPU or no driver: it
# says "gpu-kit: skipped: no GPU"), which is no pass; 1 otherwise.
set -u

kit=${2:-.gpu-kit}
py=${PYTHON:-python3}
tab=$(printf '\t')

pack() {
	build=${BUILD:-build}
	rm -rf "$kit" && mkdir -p "$kit/bin" "$kit/lib" || exit 1
	for f in "$build"/djinnd/djinnd "$build"/tools/djinnctl \
		"$build"/bench/gpu-bench "$build"/bench/model-bench \
		"$build"/bench/agent-bench "$build"/bench/stream-bench \
		"$build"/tools/djinn-bench "$build"/tools/djinn \
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
		# the build's RUNPATH ($ORIGIN/..) does not hold in KIT/bin
		LD_LIBRARY_PATH="$(cd "$build" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
			ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
	done | sort -u | while read -r soname path; do
		case $soname in
		libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
		librt.so.* | ld-linux*.so.* | libcuda.so.*) continue ;;
		esac
		cp -L "$path" "$kit/lib/$soname" || exit 1
	done
	# The toolkit the kernels and headers came from: mk/cuda.mk's nvcc
	nvcc=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
	cuda_h=$(dirname "$(readlink -f "$nvcc")")/../include/cuda.h
	{
		"$nvcc" --version 2>/dev/null |
			sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/toolkit=\1 (nvcc \2)/p'
		sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/cuda_version=\1/p' \
			"$cuda_h" 2>/dev/null
		echo "commit=$(git rev-parse --short HEAD 2>/dev/null)"
	} >"$kit/VERSIONS"
	grep -q '^cuda_version=[0-9]' "$kit/VERSIONS" || {
		echo "gpu-kit: no CUDA_VERSION in $cuda_h (NVCC=$nvcc)" >&2
		exit 1
	}
	XZ_OPT=${XZ_OPT:--T0} tar -cJf "$kit.tar.xz" -C "$kit" bin lib VERSIONS ||
		exit 1
	du -sh "$kit" "$kit.tar.xz" | awk '{ print "gpu-kit: " $2 ", " $1 }'
}

# KEY's value in the kit's VERSIONS, or empty.
kit_version() {
	sed -n "s/^$1=//p" "$kit/VERSIONS" 2>/dev/null
}

# cuDriverGetVersion() through python3's ctypes (no cuInit needed):
# 13000 for CUDA 13.0, or a word saying why there is none.
driver_cuda() {
	"$py" - 2>/dev/null <<'EOF' || echo "unknown (no $py)"
import ctypes
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("none (%s)" % e)
    raise SystemExit(0)
v = ctypes.c_int(0)
r = lib.cuDriverGetVersion(ctypes.byref(v))
print(v.value if r == 0 else "unknown (cuDriverGetVersion: %d)" % r)
EOF
}

# Directories that hold a libcublas.so.N, one per line as DIR<tab>WHERE,
# in the order they go on LD_LIBRARY_PATH: python's nvidia packages
# first, then the toolkit.
blas_dirs() {
	{
		"$py" -c 'import nvidia; print("\n".join(nvidia.__path__))' \
			2>/dev/null | while IFS= read -r p; do
			for d in "$p"/cu[0-9]*/lib "$p"/cublas/lib; do
				echo "$d${tab}$py's nvidia packages"
			done
		done
		home=${CUDA_HOME:-/usr/local/cuda}
		for d in "$home"/lib64 "$home"/targets/*/lib; do
			echo "$d${tab}the CUDA toolkit"
		done
	} | while IFS="$tab" read -r d where; do
		ls "$d"/libcublas.so.* >/dev/null 2>&1 || continue
		echo "$(readlink -f "$d")${tab}$where"
	done | awk -F "$tab" '!seen[$1]++'
}

info() {
	drv=$(driver_cuda)
	smi=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader \
		2>/dev/null | head -1)
	case $drv in
	[0-9]*)
		echo "gpu-kit: driver  ${smi:-?} (nvidia-smi), CUDA" \
			"$((drv / 1000)).$((drv % 1000 / 10))" \
			"(cuDriverGetVersion $drv)"
		;;
	*) echo "gpu-kit: driver  ${smi:-none (no nvidia-smi)}, CUDA $drv" ;;
	esac
	built=$(kit_version cuda_version)
	echo "gpu-kit: toolkit CUDA $(kit_version toolkit)," \
		"CUDA_VERSION ${built:-unknown}: the kit's kernels and headers"
	case $drv$built in
	[0-9]*)
		if [ -n "$built" ] && [ $((drv / 1000)) -lt $((built / 1000)) ]
		then
			echo "gpu-kit: WARNING: the driver's CUDA is older than" \
				"the kit's: djinnd refuses the GPU"
		fi
		;;
	esac
	# djinnd tries the driver's own major first, then older ones
	case $drv in
	[0-9]*) major=$((drv / 1000)) ;;
	*) major=$((${built:-13000} / 1000)) ;;
	esac
	dirs=$(blas_dirs)
	first=
	m=$major
	while [ -z "$first" ] && [ "$m" -ge 11 ]; do
		first=$(printf '%s\n' "$dirs" | while IFS="$tab" read -r d _; do
			[ -n "$d" ] && [ -e "$d/libcublas.so.$m" ] &&
				echo "$d/libcublas.so.$m" && break
		done)
		m=$((m - 1))
	done
	printf '%s\n' "$dirs" | while IFS="$tab" read -r d where; do
		[ -n "$d" ] || continue
		for f in "$d"/libcublas.so.*; do
			case $f in *.so.*.*) continue ;; esac
			mark=
			[ "$f" = "$first" ] && mark=" <- djinnd tries this first"
			echo "gpu-kit: cuBLAS  $f ($where)$mark"
		done
	done
	[ -n "$dirs" ] || echo "gpu-kit: cuBLAS  none found ($py's nvidia" \
		"packages, ${CUDA_HOME:-/usr/local/cuda}/lib64): MATMUL" \
		"runs on djinnd's fallback kernel"
	if ! command -v nvidia-smi >/dev/null 2>&1; then
		gpus="none (no nvidia-smi)"
	elif ! gpus=$(nvidia-smi -L 2>&1); then
		gpus="none (nvidia-smi -L: $gpus)"
	fi
	printf '%s\n' "$gpus" | sed 's/^/gpu-kit: GPU     /'
}

unpack() {
	if [ ! -d "$kit/bin" ] && [ -f "$kit.tar.xz" ]; then
		mkdir -p "$kit" && tar -xJf "$kit.tar.xz" -C "$kit" || exit 1
	fi
	[ -d "$kit/bin" ] || { echo "gpu-kit: no $kit/bin: pack first" >&2; exit 1; }
}

# Unpack the kit, make $out, and put the kit's libraries and the
# directories holding cuBLAS on LD_LIBRARY_PATH, exported.
kit_env() {
	unpack
	mkdir -p "$out" || exit 1
	extra=$(blas_dirs | cut -f1 | tr '\n' ':')
	LD_LIBRARY_PATH="$(cd "$kit/lib" && pwd):$extra${LD_LIBRARY_PATH:-}"
	LD_LIBRARY_PATH=${LD_LIBRARY_PATH%:}
	export LD_LIBRARY_PATH
}

run() {
	out=${3:-$kit/out}
	kit_env
	info | tee "$out/versions.txt"
	DJINND=$(cd "$kit/bin" && pwd)/djinnd
	# the tests write models with the checkout's script, run from here
	DJINN_MKMODEL=$(pwd)/scripts/mkmodel.py
	export DJINND DJINN_MKMODEL
	nvidia-smi -L >"$out/nvidia-smi.txt" 2>&1
	rc=0
	tests=$(ls "$kit"/bin/test_* 2>/dev/null)
	# shellcheck disable=SC2086
	sh tests/run.sh $tests 2>&1 | tee "$out/test-gpu.txt"
	tail -1 "$out/test-gpu.txt" | grep -q ' 0 failed' || rc=1
	# On a GPU host no GPU test skips: one that did found no GPU (or no
	# driver), and a kit run with skips is no pass.
	skips=$(tail -1 "$out/test-gpu.txt" | sed -n 's/.* \([0-9]*\) skipped$/\1/p')
	if [ $rc = 0 ] && [ "${skips:-0}" != 0 ]; then
		echo "gpu-kit: skipped: no GPU: $skips GPU tests did not run"
		rc=77
	fi
	"$kit/bin/gpu-bench" --djinnd "$DJINND" >"$out/gpu-bench.jsonl" \
		2>"$out/gpu-bench.err"
	s=$?
	cat "$out/gpu-bench.jsonl" "$out/gpu-bench.err"
	[ $s = 0 ] || [ $s = 77 ] || rc=1
	"$kit/bin/model-bench" --backend cuda --cache "${BENCH_CACHE:-/tmp/djinn-bench-cache}" \
		--python "$py" --rounds "${ROUNDS:-5}" \
		>"$out/model-bench.jsonl" 2>"$out/model-bench.err"
	s=$?
	cat "$out/model-bench.jsonl" "$out/model-bench.err"
	[ $s = 0 ] || [ $s = 77 ] || rc=1
	# the tiny GPT-2: a step that is nearly all host and launches
	"$kit/bin/model-bench" --backend cuda --arch gpt2-tiny --no-torch \
		--python "$py" \
		--cache "${BENCH_CACHE:-/tmp/djinn-bench-cache}" \
		--decode 256 --prefill 16 --rounds "${ROUNDS:-5}" \
		>"$out/model-bench-tiny.jsonl" 2>"$out/model-bench-tiny.err"
	s=$?
	cat "$out/model-bench-tiny.jsonl" "$out/model-bench-tiny.err"
	[ $s = 0 ] || [ $s = 77 ] || rc=1
	"$kit/bin/stream-bench" --backend cuda \
		--cache "${BENCH_CACHE:-/tmp/djinn-bench-cache}" \
		--rounds "${ROUNDS:-5}" \
		>"$out/stream-bench.jsonl" 2>"$out/stream-bench.err"
	s=$?
	cat "$out/stream-bench.jsonl" "$out/stream-bench.err"
	[ $s = 0 ] || [ $s = 77 ] || rc=1
	echo "gpu-kit: results in $out (exit $rc)"
	return $rc
}

# agent-bench on the GPU, apart from `run` for the device's time limit
agent() {
	out=${3:-$kit/out}
	kit_env
	if [ -n "${AGENTS:-}" ]; then
		sweep="--agents $AGENTS"
	else
		sweep="--grow ${GROW:-32:256}"
	fi
	# shellcheck disable=SC2086 # $sweep is two words
	"$kit/bin/agent-bench" --backend cuda --djinnd "$kit/bin/djinnd" \
		--djinnctl "$kit/bin/djinnctl" \
		--cache "${BENCH_CACHE:-/tmp/djinn-bench-cache}" \
		$sweep --measure "${MEASURE:-5}" \
		--out "$out/agent-bench.jsonl" >/dev/null 2>"$out/agent-bench.err"
	s=$?
	cat "$out/agent-bench.err"
	[ $s = 0 ] || [ $s = 77 ]
}

# model-bench --sessions on the GPU, apart from `run` for the device's
# time limit
sessions() {
	out=${3:-$kit/out}
	kit_env
	"$kit/bin/model-bench" --backend cuda --sessions "${SESSIONS:-1,8,32}" \
		--djinnd "$kit/bin/djinnd" --djinnctl "$kit/bin/djinnctl" \
		--cache "${BENCH_CACHE:-/tmp/djinn-bench-cache}" \
		--python "$py" --rounds "${ROUNDS:-1}" \
		>"$out/sessions-bench.jsonl" 2>"$out/sessions-bench.err"
	s=$?
	cat "$out/sessions-bench.jsonl" "$out/sessions-bench.err"
	[ $s = 0 ] || [ $s = 77 ]
}

# A decode step under nsys: where its time goes on the device and in the
# driver, before optimising it (issue 29)
profile() {
	out=${3:-$kit/out}
	kit_env
	nsys=$(command -v nsys)
	for n in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys; do
		[ -n "$nsys" ] || [ ! -x "$n" ] || nsys=$n
	done
	if [ -z "$nsys" ]; then
		echo "gpu-kit: no nsys on this machine: no profile"
		return 77
	fi
	"$nsys" profile --force-overwrite true --trace cuda,osrt \
		-o "$out/decode" "$kit/bin/model-bench" --backend cuda \
		--arch "${ARCH:-gpt2-tiny}" --no-torch --python "$py" \
		--cache "${BENCH_CACHE:-/tmp/djinn-bench-cache}" \
		--decode "${DECODE:-64}" --prefill 16 --rounds 1 \
		>"$out/profile-bench.jsonl" 2>"$out/profile.err"
	s=$?
	cat "$out/profile-bench.jsonl"
	[ $s = 0 ] || { cat "$out/profile.err"; return 1; }
	"$nsys" stats --force-export true \
		--report cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum \
		"$out/decode.nsys-rep" 2>&1 | tee "$out/profile.txt"
}

# djinn-bench tls on the host's kernel, which may have the tls module
# that the build machine's lacks: kernel TLS figures on real cores
tls() {
	out=${3:-$kit/out}
	unpack
	mkdir -p "$out" || exit 1
	{
		echo "kernel $(uname -r)"
		echo "ULPs before: $(cat /proc/sys/net/ipv4/tcp_available_ulp)"
		modprobe tls 2>&1 && echo "modprobe tls: ok"
		echo "ULPs after: $(cat /proc/sys/net/ipv4/tcp_available_ulp)"
		grep -m1 -o -w aes /proc/cpuinfo | sed 's/^/cpu: /'
	} >"$out/tls-env.txt" 2>&1
	cat "$out/tls-env.txt"
	LD_LIBRARY_PATH="$(cd "$kit/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		"$kit/bin/djinn-bench" --djinnd "$kit/bin/djinnd" \
		--seconds "${SECONDS_EACH:-2}" tls >"$out/tls-bench.jsonl" \
		2>"$out/tls-bench.err"
	s=$?
	cat "$out/tls-bench.jsonl" "$out/tls-bench.err"
	return $s
}

# the Python package's tests against the kit's programs, on the GPU
python_tests() {
	out=${3:-$kit/out}
	kit_env
	bin=$(cd "$kit/bin" && pwd)
	if ! "$py" -c 'import numpy, pytest' 2>/dev/null; then
		echo "gpu-kit: $py has no numpy or pytest: the Python tests skipped"
		return 0
	fi
	(cd python && DJINN_TEST_BACKEND=cuda \
		DJINND=$bin/djinnd DJINNCTL=$bin/djinnctl \
		DJINN_TOOL=$bin/djinn \
		DJINN_LIBRARY=$(cd "../$kit/lib" && pwd)/libdjinn.so.0 \
		"$py" -m pytest -q -p no:cacheprovider tests) 2>&1 |
		tee "$out/python.txt"
	tail -1 "$out/python.txt" | grep -q ' passed' &&
		! tail -1 "$out/python.txt" | grep -q 'failed'
}

case ${1:-} in
pack) pack ;;
run) run "$@" ;;
agent) agent "$@" ;;
sessions) sessions "$@" ;;
tls) tls "$@" ;;
python) python_tests "$@" ;;
profile) profile "$@" ;;
info) unpack && info ;;
*)
	echo "usage: $0 pack [KIT] | run [KIT] [OUT] | agent [KIT] [OUT] | sessions [KIT] [OUT] | tls [KIT] [OUT] | python [KIT] [OUT] | profile [KIT] [OUT] | info [KIT]" >&2
	exit 2
	;;
esac
