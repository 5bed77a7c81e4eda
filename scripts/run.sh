#!/bin/sh
# make run: the main job. Writes a small GPT-2-shaped model with seeded
# random weights into ./models/tiny-gpt2 (once; no downloads), starts
# djinnd in the foreground on the CPU backend with its sockets under
# ./run/ and its models from ./models/, generates from the model in two
# sessions at once (examples/generate) and shows with djinnctl that its
# weights were loaded once and held twice; then runs the graph client
# (two GPT-2 blocks, the output read lazily) twice, the second time as a
# program that finds the weights already there, shows the device's
# memory with djinnctl, and stops the daemon with SIGTERM.
set -eu
B=${BUILD:-build}
SOCK=run/djinnd.sock
ADMIN=run/admin.sock
MODEL=tiny-gpt2

mkdir -p run models
if [ ! -f "models/$MODEL/config.json" ]; then
	echo "== writing models/$MODEL: GPT-2 shapes, 4 layers, seeded random weights"
	python3 scripts/mkmodel.py --arch gpt2 --layers 4 --embd 256 \
		--heads 8 --vocab 4096 --ctx 256 --seed 1 "models/$MODEL"
fi
"$B/djinnd/djinnd" --foreground --listen "unix:$SOCK" --admin-socket "$ADMIN" \
	--cpu-mem 1G --log-level notice --model-dir "$PWD/models" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid' EXIT INT TERM

i=0
while [ ! -S "$SOCK" ]; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $pid 2>/dev/null; then
		echo "run: djinnd did not start" >&2
		exit 1
	fi
	sleep 0.05
done

echo "== djinnd (pid $pid) listening on unix:$SOCK"
echo "== djinnctl model list: nothing loaded yet"
"$B/tools/djinnctl" -s "$ADMIN" model list
echo "== two sessions at once generate from $MODEL (weights stay in djinnd)"
"$B/examples/generate" "unix:$SOCK" "$MODEL" 2 >run/generate.out &
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
"$B/tools/djinnctl" -s "$ADMIN" model list
wait $gpid
tail -n 1 run/generate.out
echo "== the same with tools/djinn, pausing after layer 1 at every step"
"$B/tools/djinn" -a "unix:$SOCK" generate -m "$MODEL" -t 464,2068,3490 -n 4 \
	--break-at 1
echo "== a client: upload one GPT-2 block's weights, run two blocks, read 1% lazily"
"$B/examples/gpt2-block" "unix:$SOCK"
echo "== a second client with the same weights: only fingerprints cross the wire"
"$B/examples/gpt2-block" "unix:$SOCK"
echo "== djinnctl vmu"
"$B/tools/djinnctl" -s "$ADMIN" vmu
echo "== djinnctl stats"
"$B/tools/djinnctl" -s "$ADMIN" stats
