#!/bin/sh
# make run, make serve: djinnd from this checkout.
#
# run.sh [--serve]
#
# Writes a small GPT-2-shaped model with seeded random weights into
# ./models/tiny-gpt2 (once; no downloads) and starts djinnd in the
# foreground on the CPU backend, with its sockets under ./run/ and its
# models from ./models/. DJINN_ADDR and DJINN_ADMIN_SOCKET name them for
# every client started here.
#
# make run (no argument): the demo. It generates from the model in two
# sessions at once (examples/generate) and shows with djinnctl that its
# weights were loaded once and held twice; generates again with
# tools/djinn, pausing after a layer; runs the graph client (two GPT-2
# blocks, the output read lazily) twice, the second time as a program
# that finds the weights already there; and shows the device's memory and
# the daemon's counters with djinnctl. Then, on a terminal (stdin is a
# tty), djinnd keeps serving until Ctrl-C; elsewhere (CI) it is stopped
# with SIGTERM.
#
# make serve (--serve): djinnd alone, serving until Ctrl-C or SIGTERM.
set -eu
B=${BUILD:-build}
MODEL=tiny-gpt2
serve=
case ${1:-} in
--serve) serve=1 ;;
'') ;;
*)
	echo "usage: run.sh [--serve]" >&2
	exit 2
	;;
esac

# Absolute, so that the exported addresses work from any directory, unless
# that would not fit in a socket address (107 bytes): then relative, for
# clients started here.
RUN=$PWD/run
[ ${#RUN} -le 90 ] || RUN=run
SOCK=$RUN/djinnd.sock
ADMIN=$RUN/admin.sock
export DJINN_ADDR="unix:$SOCK" DJINN_ADMIN_SOCKET="$ADMIN"

mkdir -p run models
if [ ! -f "models/$MODEL/config.json" ]; then
	echo "== writing models/$MODEL: GPT-2 shapes, 4 layers, seeded random weights"
	python3 scripts/mkmodel.py --arch gpt2 --layers 4 --embd 256 \
		--heads 8 --vocab 4096 --ctx 256 --seed 1 "models/$MODEL"
fi
# djinnd replaces a socket left behind, even a live one: not another
# djinnd's that still answers here.
if "$B/tools/djinnctl" stats >/dev/null 2>&1; then
	echo "run: a djinnd already serves $DJINN_ADDR (Ctrl-C it first)" >&2
	exit 1
fi

"$B/djinnd/djinnd" --foreground --listen "$DJINN_ADDR" --admin-socket "$ADMIN" \
	--cpu-mem 1G --log-level notice --model-dir models &
pid=$!
stop() {
	trap - EXIT INT TERM
	kill -TERM $pid 2>/dev/null || :
	wait $pid 2>/dev/null || :
}
trap stop EXIT
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM

i=0
while [ ! -S "$SOCK" ]; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $pid 2>/dev/null; then
		echo "run: djinnd did not start" >&2
		exit 1
	fi
	sleep 0.05
done
echo "== djinnd (pid $pid) listening on $DJINN_ADDR"

# Serving: until djinnd ends, or Ctrl-C (the trap stops it).
serve() {
	cat <<EOF
== djinnd serves the models in ./models/ until Ctrl-C stops it.
   From another shell in $PWD:
     export DJINN_ADDR=$DJINN_ADDR
     export DJINN_ADMIN_SOCKET=$DJINN_ADMIN_SOCKET
     PYTHONPATH=python python3 -c 'import djinn; print(djinn.connect().server_info())'
EOF
	ret=0
	wait $pid || ret=$?
	trap - EXIT INT TERM
	exit $ret
}
[ -z "$serve" ] || serve

echo "== djinnctl model list: nothing loaded yet"
"$B/tools/djinnctl" model list
echo "== two sessions at once generate from $MODEL (weights stay in djinnd)"
"$B/examples/generate" "$DJINN_ADDR" "$MODEL" 2 >run/generate.out &
gpid=$!
i=0
until grep -qs '^both sessions hold' run/generate.out; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 $gpid 2>/dev/null; then
		cat run/generate.out
		echo "run: the generate example failed" >&2
		exit 1
	fi
	sleep 0.05
done
cat run/generate.out
echo "== djinnctl model list: loaded once, 2 holders"
"$B/tools/djinnctl" model list
wait $gpid
tail -n 1 run/generate.out
echo "== the same with tools/djinn, pausing after layer 1 at every step"
"$B/tools/djinn" generate -m "$MODEL" -t 464,2068,3490 -n 4 --break-at 1
echo "== a client: upload one GPT-2 block's weights, run two blocks, read 1% lazily"
"$B/examples/gpt2-block" "$DJINN_ADDR"
echo "== a second client with the same weights: only fingerprints cross the wire"
"$B/examples/gpt2-block" "$DJINN_ADDR"
echo "== djinnctl vmu"
"$B/tools/djinnctl" vmu
echo "== djinnctl stats"
"$B/tools/djinnctl" stats

if [ -t 0 ]; then
	serve
fi
echo "== stopping djinnd (stdin is not a terminal; make serve keeps one up)"
